"""The processor over a prefetching scan: same output as without, read and wait times in the progress record."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from reference import as_multiset

from ssbj.adapters.sink_parquet import ParquetDirSink
from ssbj.contracts import DEAD_LETTER_SCHEMA
from ssbj.core import ArrowMaster
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.prefetch import PrefetchingScan
from ssbj.pipeline.processor import EnrichmentProcessor
from ssbj.pipeline.records import Decoded
from ssbj.planning import JoinSettings


class _Scan(ArrowMaster):
    """R in memory as fresh buffers per read (as from a database), with the layout a checkpointed scan saves."""

    def read_partition(self, p: int) -> pa.Table:
        time.sleep(0.002)
        part = super().read_partition(p)
        return pa.table({c: part.column(c).to_pylist() for c in part.column_names}, schema=part.schema)

    def layout(self) -> dict[str, Any]:
        return {}

    def repartition(self, partition_rows: int) -> _Scan:
        return _Scan(self._table, partition_rows)


class _Recorder:
    def __init__(self) -> None:
        self.reads: list[int] = []

    def on_step(self, result: Any) -> None:
        pass

    def before_partition_read(self, partition: int) -> None:
        pass

    def after_partition_read(self, partition: int, rows: int, seconds: float) -> None:
        self.reads.append(partition)


def _decoded(b: pa.RecordBatch) -> Decoded:
    return Decoded(pa.Table.from_batches([b]), DEAD_LETTER_SCHEMA.empty_table())


def _run(tmp: Path, depth: int) -> tuple[Any, list[PrefetchingScan], _Recorder, list[dict[str, Any]]]:
    master = pa.table({"k": [i // 2 for i in range(200)], "name": [f"n{i}" for i in range(200)]})
    stream = pa.table({"sk": [(i * 7) % 130 if i % 17 else None for i in range(3000)], "v": list(range(3000))})
    scans: list[PrefetchingScan] = []

    def factory(layout: dict[str, Any] | None, rows: int) -> Any:
        scans.append(PrefetchingScan(_Scan(master, rows), depth))
        return scans[-1]

    rec = _Recorder()
    proc = EnrichmentProcessor(
        JoinSettings("sk", "k", ("name",), join_type="left", partition_rows=30, step_rows=150, prefetch=depth),
        stream.schema,
        factory,
        lambda: (master.num_rows, master.schema),
        ParquetDirSink(tmp / "out"),
        ParquetDirSink(tmp / "dead"),
        DirectoryStore(tmp / "ck"),
        observer=rec,
    )
    reports = []
    batches = stream.to_batches(max_chunksize=500)
    for i, b in enumerate(batches):
        reports.append(proc.process(i, lambda b=b: _decoded(b)))
        if i == 3:  # a replay of batch 3: rolled back to checkpoint 2, a new scan
            reports.append(proc.process(3, lambda b=b: _decoded(b)))
    drained = proc.drain(lambda batch_id: True)
    assert drained is not None
    reports.append(drained)
    out = ds.dataset(str(tmp / "out"), format="parquet").to_table().select(["sk", "v", "name"])
    return out, scans, rec, reports


def test_processor_with_prefetch_writes_what_it_writes_without(tmp_path: Path) -> None:
    off, _, _, _ = _run(tmp_path / "off", 0)
    on, scans, rec, reports = _run(tmp_path / "on", 1)
    assert as_multiset(on) == as_multiset(off) and on.num_rows > 3000 - 200
    assert len(scans) == 2  # the first, and the one the replay restored with
    assert scans[0].closed and not scans[1].closed  # the replaced scan was closed by the processor
    assert sum(s.stats.hits for s in scans) > 10
    for r in reports:
        assert set(r["master_read"]) == {"read_seconds", "wait_seconds"}
        assert r["master_read"]["read_seconds"] >= 0.002 * r["steps"]
        assert "prefetch" in r["memory"]
    for s in scans:
        s.close()
    assert not any(t.name == "ssbj-prefetch" for t in threading.enumerate())
    assert rec.reads  # the observer still sees every read the steps make
