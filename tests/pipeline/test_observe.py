"""The processor's observer seam sees every step and every partition read, without patching."""

import io
import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ssbj.adapters.sink_parquet import ParquetDirSink
from ssbj.contracts import DEAD_LETTER_SCHEMA
from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin, StepResult
from ssbj.core.checkpoint import DirectoryStore
from ssbj.logs import FieldsFormatter, record_fields
from ssbj.pipeline.commands import ProgressDisplay
from ssbj.pipeline.observe import FanOut
from ssbj.pipeline.processor import EnrichmentProcessor
from ssbj.pipeline.records import Decoded
from ssbj.planning import JoinSettings


class _Scan(ArrowMaster):
    """R in memory, with the (empty) layout a checkpointed scan saves."""

    def layout(self) -> dict[str, Any]:
        return {}

    def repartition(self, partition_rows: int) -> "_Scan":
        return _Scan(self._table, partition_rows)


class _Recorder:
    def __init__(self) -> None:
        self.steps: list[StepResult] = []
        self.before: list[int] = []
        self.reads: list[tuple[int, int]] = []

    def on_step(self, result: StepResult) -> None:
        self.steps.append(result)

    def before_partition_read(self, partition: int) -> None:
        self.before.append(partition)

    def after_partition_read(self, partition: int, rows: int, seconds: float) -> None:
        assert seconds >= 0
        self.reads.append((partition, rows))


def test_observer_sees_every_step_and_partition_read(tmp_path: Path) -> None:
    master = pa.table({"k": list(range(100)), "name": [f"n{i}" for i in range(100)]})
    stream = pa.table({"sk": [i % 130 for i in range(1000)], "v": list(range(1000))})
    a, b = _Recorder(), _Recorder()
    proc = EnrichmentProcessor(
        JoinSettings("sk", "k", ("name",), partition_rows=30, step_rows=200),
        stream.schema,
        lambda layout, rows: _Scan(master, rows),
        lambda: (master.num_rows, master.schema),
        ParquetDirSink(tmp_path / "out"),
        ParquetDirSink(tmp_path / "dead"),
        DirectoryStore(tmp_path / "ck"),
        observer=FanOut(a, b),
    )
    report = proc.process(0, lambda: Decoded(stream, DEAD_LETTER_SCHEMA.empty_table()))
    drained = proc.drain(lambda batch_id: True)
    assert drained is not None
    assert a.steps and a.steps == b.steps and a.reads == b.reads
    assert len(a.steps) == report["steps"] + drained["steps"]
    assert [p for p, _ in a.reads] == a.before == [r.metrics.partition for r in a.steps]
    # every partition of R is 30 rows but the last (10), read once per step
    assert {p: n for p, n in a.reads} == {0: 30, 1: 30, 2: 30, 3: 10}
    assert sum(r.enriched.num_rows for r in a.steps) == proc.totals.enriched_rows
    assert proc.counts().reconciled and proc.counts().waiting == 0


def test_progress_is_logged_with_structured_fields(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    master = pa.table({"k": [1, 2], "name": ["a", "b"]})
    stream = pa.table({"sk": [1, 2, 3], "v": [10, 20, 30]})
    proc = EnrichmentProcessor(
        JoinSettings("sk", "k", ("name",), partition_rows=2, step_rows=10),
        stream.schema,
        lambda layout, rows: _Scan(master, rows),
        lambda: (master.num_rows, master.schema),
        ParquetDirSink(tmp_path / "out"),
        ParquetDirSink(tmp_path / "dead"),
        DirectoryStore(tmp_path / "ck"),
    )
    with caplog.at_level(logging.INFO, logger="ssbj.progress"):
        proc.process(0, lambda: Decoded(stream, DEAD_LETTER_SCHEMA.empty_table()))
    (rec,) = [r for r in caplog.records if r.name == "ssbj.progress"]
    assert rec.getMessage().startswith("batch 0.0: 3 records")
    assert "{" not in rec.getMessage()
    got = record_fields(rec)
    assert got["batch_id"] == 0 and got["records_in"] == 3 and got["totals"]["records_in"] == 3
    line = FieldsFormatter("%(name)s %(message)s").format(rec)
    assert json.loads(line[line.index("{") :])["event"] == "batch"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_display_shows_steps_on_a_terminal_only() -> None:
    master = pa.table({"k": list(range(10)), "name": [str(i) for i in range(10)]})
    op = SemiStreamJoin(
        JoinSpec("sk", "k", ("name",), chunk_bytes=64),
        ArrowMaster(master, 4),
        pa.schema([("sk", pa.int64())]),
        master.schema,
    )
    op.push(pa.table({"sk": [1, 5, 9]}))
    result = op.step()
    term, pipe = _Terminal(), io.StringIO()
    ProgressDisplay(term).on_step(result)
    ProgressDisplay(pipe).on_step(result)
    assert f"R-cycle {result.metrics.r_cycle} part {result.metrics.partition + 1}/3" in term.getvalue()
    assert pipe.getvalue() == ""
