"""Parquet directory sink: batch and segment replacement, schema record, no partial files."""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from sql_cases import OUT

from ssbj.adapters.sink_parquet import SCHEMA_FILE, STALE_TMP_SECONDS, ParquetDirSink, file_name
from ssbj.contracts import BATCH_ID_COLUMN, SEGMENT_COLUMN, WarehouseSink
from ssbj.errors import (
    InputError,
    StateError,
)


# ---------------------------------------------------------------- Parquet sink
def read_dir(path: Path) -> pa.Table:
    return ds.dataset(path, format="parquet").to_table()


def test_parquet_sink_replaces_each_batch_and_segment(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = ParquetDirSink(out)
    assert isinstance(sink, WarehouseSink)
    sink.prepare(OUT.schema)
    sink.write(1, 0, OUT)
    sink.write(1, 0, OUT)
    sink.write(1, 1, OUT.slice(0, 2))
    sink.write(12, 3, OUT.slice(0, 1))
    files = sorted(p.name for p in out.iterdir())
    assert files == [SCHEMA_FILE, file_name(1, 0), file_name(1, 1), file_name(12, 3)]
    assert file_name(12, 3) == "batch=000000000012-seg=0003.parquet"
    got = read_dir(out)
    assert got.num_rows == 7
    pairs = zip(got.column(BATCH_ID_COLUMN).to_pylist(), got.column(SEGMENT_COLUMN).to_pylist(), strict=True)
    assert Counter(pairs) == Counter({(1, 0): 4, (1, 1): 2, (12, 3): 1})
    one = pq.read_table(out / file_name(1, 0))
    assert one.drop_columns([BATCH_ID_COLUMN, SEGMENT_COLUMN]).equals(OUT)
    assert one.schema.field(BATCH_ID_COLUMN).type == pa.int64()
    sink.write(1, 1, OUT.slice(0, 0))  # empty: removes the earlier attempt's file
    sink.write(7, 0, OUT.slice(0, 0))  # empty and nothing there: no file
    assert sorted(p.name for p in out.iterdir()) == [SCHEMA_FILE, file_name(1, 0), file_name(12, 3)]
    sink.close()


def test_parquet_sink_schema_is_recorded_and_checked(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "out"
    ParquetDirSink(out).prepare(OUT.schema)
    ParquetDirSink(out).prepare(OUT.schema)  # the same schema again: fine
    changed = OUT.schema.set(0, pa.field("sid", pa.int32()))
    with pytest.raises(StateError, match=r"changed sid \(int64 -> int32\)"):
        ParquetDirSink(out).prepare(changed)
    with pytest.raises(StateError, match="missing ts"):
        ParquetDirSink(out).prepare(OUT.schema.remove(5))
    sink = ParquetDirSink(out)
    sink.prepare(OUT.schema)
    with pytest.raises(InputError, match="changed sid"):
        sink.write(1, 0, OUT.cast(changed))
    with pytest.raises(StateError, match="before prepare"):
        ParquetDirSink(out).write(1, 0, OUT)


def test_parquet_sink_leaves_no_partial_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    sink = ParquetDirSink(out)
    sink.prepare(OUT.schema)
    sink.write(3, 0, OUT)

    def boom(*_: Any, **__: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", boom)
    with pytest.raises(OSError, match="disk full"):
        sink.write(3, 0, OUT.slice(0, 1))
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == [SCHEMA_FILE, file_name(3, 0)]
    assert pq.read_table(out / file_name(3, 0)).num_rows == 4  # the old file is intact
    stale = out / f".{file_name(4, 0)}.{uuid.uuid4().hex}.tmp"
    stale.write_bytes(b"partial")
    old = time.time() - STALE_TMP_SECONDS - 1
    os.utime(stale, (old, old))
    in_progress = out / f".{file_name(5, 1)}.{uuid.uuid4().hex}.tmp"  # another shard writing right now
    in_progress.write_bytes(b"partial")
    ParquetDirSink(out).prepare(OUT.schema)  # a restarted job drops stale temp files
    assert not stale.exists()
    assert in_progress.exists()  # a young temp file may be another writer's: kept
    in_progress.unlink()
    assert sorted(os.listdir(out)) == [SCHEMA_FILE, file_name(3, 0)]
