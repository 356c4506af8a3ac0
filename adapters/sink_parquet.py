"""An idempotent warehouse sink into a directory of Parquet files, one file per (batch id, segment).

``write(b, s, table)`` writes ``batch=<b:012d>-seg=<s:04d>.parquet`` through a temporary file
(fsync, ``os.replace``, fsync of the directory), so a reader sees the old file or the new
one, never a partial one, and a replayed write replaces the file.  An empty table writes no
file and removes the one an earlier attempt wrote.  ``_schema.json`` records the schema at
the first :meth:`ParquetDirSink.prepare`; a later prepare with another schema fails.
Temporary files start with ``.`` and the schema file with ``_``, which
``pyarrow.dataset`` ignores, so the directory reads as one dataset.  ``prepare`` removes
temporary files older than :data:`STALE_TMP_SECONDS` only: shards of one job prepare and
write the same directory at the same time, and a younger temporary file may be another
writer's write in progress.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from ssbj.contracts import BATCH_ID_COLUMN, SEGMENT_COLUMN
from ssbj.errors import ConfigError, InputError, ServiceError, StateError

log = logging.getLogger(__name__)

SCHEMA_FILE = "_schema.json"
# A temp file this old is a crashed writer's (one Parquet write never takes this long);
# a younger one may be another shard's write in progress.
STALE_TMP_SECONDS = 600.0
_TMP = re.compile(r"^\.(batch=\d+-seg=\d+\.parquet|_schema\.json)\.[0-9a-f]{32}\.tmp$")


def file_name(batch_id: int, segment: int) -> str:
    """Name of the file holding (``batch_id``, ``segment``)."""
    return f"batch={batch_id:012d}-seg={segment:04d}.parquet"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _describe(schema: pa.Schema) -> list[dict[str, Any]]:
    return [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema]


class ParquetDirSink:
    """Rows of each (batch id, segment) in their own Parquet file, replaced atomically."""

    def __init__(self, directory: str | os.PathLike[str], *, compression: str = "zstd") -> None:
        """Write into ``directory`` (created at :meth:`prepare`) with Parquet ``compression``."""
        self._dir = Path(directory)
        self._compression = compression
        self._schema: pa.Schema | None = None
        self._out_schema: pa.Schema | None = None

    @property
    def directory(self) -> Path:
        """The target directory."""
        return self._dir

    def prepare(self, schema: pa.Schema) -> None:
        """Create the directory, record ``schema`` (or check it against the recorded one), drop stale temp files.

        A temp file younger than :data:`STALE_TMP_SECONDS` is kept: it may be another shard's write in progress.
        """
        for reserved in (BATCH_ID_COLUMN, SEGMENT_COLUMN):
            if reserved in schema.names:
                raise ConfigError(f"column {reserved!r} is reserved for the sink; rename it in the output")
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ServiceError(f"cannot create sink directory {self._dir}: {e}") from None
        schema = schema.remove_metadata()
        path = self._dir / SCHEMA_FILE
        if path.exists():
            recorded = self._load_schema(path)
            if not recorded.equals(schema):
                raise StateError(self._mismatch(recorded, schema))
        else:
            doc = {
                "fields": _describe(schema),
                "arrow_schema": base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"),
            }
            self._atomic_write(path, lambda f: f.write(json.dumps(doc, indent=2).encode()))
        self._drop_stale_temp_files()
        self._schema = schema
        self._out_schema = schema.append(pa.field(BATCH_ID_COLUMN, pa.int64(), nullable=False)).append(
            pa.field(SEGMENT_COLUMN, pa.int32(), nullable=False)
        )

    def _drop_stale_temp_files(self) -> None:
        cutoff = time.time() - STALE_TMP_SECONDS
        for p in self._dir.iterdir():
            if not _TMP.match(p.name):
                continue
            with contextlib.suppress(FileNotFoundError):  # its writer renamed or removed it meanwhile
                if p.stat().st_mtime < cutoff:
                    p.unlink(missing_ok=True)

    def _load_schema(self, path: Path) -> pa.Schema:
        try:
            doc = json.loads(path.read_text())
            return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(doc["arrow_schema"])))
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowInvalid) as e:
            raise StateError(f"cannot read the recorded schema {path}: {e}") from None

    def _mismatch(self, recorded: pa.Schema, schema: pa.Schema) -> str:
        old = {f.name: f for f in recorded}
        new = {f.name: f for f in schema}
        parts = []
        if gone := [n for n in old if n not in new]:
            parts.append(f"missing {', '.join(gone)}")
        if added := [n for n in new if n not in old]:
            parts.append(f"new {', '.join(added)}")
        if changed := [f"{n} ({old[n].type} -> {new[n].type})" for n in new if n in old and old[n] != new[n]]:
            parts.append(f"changed {', '.join(changed)}")
        if not parts:
            parts.append(f"column order {recorded.names} -> {schema.names}")
        return (
            f"sink directory {self._dir} holds rows of another schema ({'; '.join(parts)}); "
            f"write to a new directory or remove {SCHEMA_FILE} together with the old files"
        )

    def write(self, batch_id: int, segment: int, table: pa.Table) -> None:
        """Replace the file of (``batch_id``, ``segment``) by ``table`` (or remove it if ``table`` is empty)."""
        if self._schema is None or self._out_schema is None:
            raise StateError("ParquetDirSink.write before prepare()")
        if batch_id < 0 or segment < 0:
            raise StateError(f"batch_id and segment must be >= 0, got {batch_id}, {segment}")
        target = self._dir / file_name(batch_id, segment)
        if table.num_rows == 0:
            if target.exists():
                target.unlink()
                _fsync_dir(self._dir)
                log.info("sink %s: batch %d segment %d is empty, removed %s", self._dir, batch_id, segment, target.name)
            return
        if table.schema.names != self._schema.names or table.schema.types != self._schema.types:
            why = self._mismatch(self._schema, table.schema)
            raise InputError(f"rows for sink {self._dir} do not match the prepared schema: {why}")
        n = table.num_rows
        out = pa.Table.from_arrays(
            [
                *table.columns,
                pa.repeat(pa.scalar(batch_id, pa.int64()), n),
                pa.repeat(pa.scalar(segment, pa.int32()), n),
            ],
            schema=self._out_schema,
        )
        self._atomic_write(target, lambda f: pq.write_table(out, f, compression=self._compression))

    def _atomic_write(self, target: Path, fill: Callable[[BinaryIO], object]) -> None:
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            with tmp.open("wb") as f:
                fill(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        _fsync_dir(self._dir)

    def close(self) -> None:
        """Nothing to release (every write is complete when it returns)."""
