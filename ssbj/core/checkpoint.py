"""Incremental, atomic checkpoints of the operator state in a directory.

Layout (all names relative to the checkpoint directory)::

    chunk-<base>.arrow   one H_S chunk with its immutable slot data, written once
    hr-<version>.arrow   H_R, written when the cache changes (once per R-cycle at most)
    sb-<id>.arrow        one piece of the switching buffer, written once
    buf-<id>.arrow       unread stream-buffer tuples of checkpoint <id>
    state-<id>.npz       per-join-value entries and match flags of checkpoint <id>
    manifest-<id>.json   scalars and the list of files above; written last, atomically
    LATEST               id of the newest complete manifest

A checkpoint exists once its manifest exists, so a crash while writing leaves the
previous checkpoint intact.  Files not referenced by the newest ``retain`` manifests
are deleted after each checkpoint.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ssbj.errors import CheckpointError

_MANIFEST = re.compile(r"^manifest-(\d+)\.json$")


class DirectoryStore:
    """A directory of immutable files, written by atomic rename and fsync."""

    def __init__(self, path: str | Path, retain: int = 2) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.retain = max(1, retain)

    def exists(self, name: str) -> bool:
        """Whether ``name`` was written."""
        return (self.path / name).exists()

    def write(self, name: str, data: bytes) -> None:
        """Write ``name`` atomically."""
        tmp = self.path / f".{name}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path / name)

    def read(self, name: str) -> bytes:
        """Contents of ``name``."""
        try:
            return (self.path / name).read_bytes()
        except OSError as exc:
            raise CheckpointError(f"checkpoint file {self.path / name} is missing: {exc}") from exc

    def write_table(self, name: str, table: pa.Table) -> None:
        """Write an Arrow IPC file atomically."""
        sink = io.BytesIO()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        self.write(name, sink.getvalue())

    def read_table(self, name: str) -> pa.Table:
        """Read an Arrow IPC file."""
        return pa.ipc.open_file(pa.BufferReader(self.read(name))).read_all()

    def write_arrays(self, name: str, arrays: dict[str, np.ndarray]) -> None:
        """Write NumPy arrays (compressed npz) atomically."""
        sink = io.BytesIO()
        np.savez_compressed(sink, **arrays)  # type: ignore[arg-type]
        self.write(name, sink.getvalue())

    def read_arrays(self, name: str) -> dict[str, np.ndarray]:
        """Read arrays written by :meth:`write_arrays`."""
        with np.load(io.BytesIO(self.read(name)), allow_pickle=False) as data:
            return {k: data[k] for k in data.files}

    def manifests(self) -> list[int]:
        """Ids of complete checkpoints, oldest first."""
        ids = []
        for p in self.path.iterdir():
            m = _MANIFEST.match(p.name)
            if m:
                ids.append(int(m.group(1)))
        return sorted(ids)

    def latest(self) -> int | None:
        """Id of the newest complete checkpoint."""
        ids = self.manifests()
        return ids[-1] if ids else None

    def write_manifest(self, checkpoint_id: int, manifest: dict[str, Any]) -> None:
        """Commit a checkpoint, then delete what no retained checkpoint references.

        Checkpoints newer than ``checkpoint_id`` belong to a run that was rolled back
        (restored from an older checkpoint); they are dropped first.
        """
        for i in self.manifests():
            if i > checkpoint_id:
                (self.path / f"manifest-{i}.json").unlink(missing_ok=True)
        self.write(f"manifest-{checkpoint_id}.json", json.dumps(manifest, sort_keys=True).encode())
        self.write("LATEST", str(checkpoint_id).encode())
        self._collect(checkpoint_id)

    def read_manifest(self, checkpoint_id: int | None = None) -> tuple[int, dict[str, Any]]:
        """Return the manifest of ``checkpoint_id`` (default: the newest)."""
        cid = self.latest() if checkpoint_id is None else checkpoint_id
        if cid is None:
            raise CheckpointError(f"no checkpoint in {self.path}")
        data: dict[str, Any] = json.loads(self.read(f"manifest-{cid}.json"))
        return cid, data

    def _collect(self, newest: int) -> None:
        ids = [i for i in self.manifests() if i <= newest]
        keep_ids = ids[-self.retain :]
        keep: set[str] = {"LATEST"}
        for i in keep_ids:
            _, m = self.read_manifest(i)
            keep.add(f"manifest-{i}.json")
            keep.update(m["files"])
        for p in self.path.iterdir():
            if p.name.startswith("."):
                continue
            if p.name not in keep:
                p.unlink(missing_ok=True)
