"""The multi-way processor without Spark: random batches, crashes at every point, replays; equal to DuckDB.

A crash is an exception raised at one of the pipeline's crash points (``faults.crash_point``);
the processor is then thrown away and a new one opens the checkpoint directory, as a
restarted ``ssbj run`` does, and the batch is delivered again under the same id, as Spark
does for a batch it has not committed. A replay inside one process (Spark retrying a
batch) goes to the same processor.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import sqlalchemy as sa
from crash_faults import Crash, armed_crashes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multiway_pipeline_data import COLUMNS, STREAM_SCHEMA, duckdb_answer, job, load_masters, masters, stream

from ssbj.config import parse_multiway_config
from ssbj.contracts import DEAD_LETTER_SCHEMA
from ssbj.core.checkpoint import DirectoryStore
from ssbj.pipeline.multiway_job import MultiWayProcessor, build_multiway_processor
from ssbj.pipeline.records import Decoded

POINTS = ("after-decode", "after-sink", "in-checkpoint", "after-checkpoint", "replay")


def _rows_table(rows: list[dict[str, Any]]) -> pa.Table:
    schema = pa.schema([(c, pa.float64() if c == "o_amount" else pa.int64()) for c in STREAM_SCHEMA])
    return pa.Table.from_pylist(rows, schema=schema)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=4).filter(lambda s: sum(s) > 0),
    crashes=st.dictionaries(st.integers(0, 7), st.sampled_from(POINTS), max_size=3),
    step_rows=st.sampled_from([None, 70]),
    memory=st.sampled_from(["memory", "lsm"]),
)
def test_crashes_and_replays_leave_exactly_the_duckdb_answer(
    sizes: list[int], crashes: dict[int, str], step_rows: int | None, memory: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        tables = masters(seed=21, customers=120)
        load_masters(sa.create_engine(f"sqlite:///{tmp / 'm.db'}"), tables)
        rows, _, _ = stream(seed=22, n=900, customers=120)
        (tmp / "landing").mkdir()
        cfg = parse_multiway_config(
            job(
                tmp,
                {"url": f"sqlite:///{tmp / 'm.db'}"},
                {"kind": "files", "path": str(tmp / "landing"), "format": "jsonl"},
                {"kind": "parquet", "path": str(tmp / "out")},
                {"kind": "parquet", "path": str(tmp / "dl")},
                masters={
                    "customer": {"mode": "scanned", "partition_rows": 30},
                    "nation": {"mode": "auto"},
                    "part": {"mode": "scanned", "partition_rows": 25},
                },
                join={"memory": "16MiB", "step_rows": step_rows, "store": memory},
            )
        )
        batches: list[pa.Table] = []
        pos, i = 0, 0
        while pos < len(rows):
            n = sizes[i % len(sizes)]
            batches.append(_rows_table(rows[pos : pos + n]))
            pos, i = pos + n, i + 1

        def new() -> MultiWayProcessor:
            return build_multiway_processor(cfg, DirectoryStore(cfg.operator_checkpoint))

        proc = new()
        proc.open()
        with armed_crashes(crashes) as armed:
            for b, t in enumerate(batches):

                def decode(t: pa.Table = t) -> Decoded:
                    return Decoded(t, DEAD_LETTER_SCHEMA.empty_table())

                try:
                    proc.process(b, decode)
                except Crash:
                    proc = new()  # the process died; the restarted job reopens the checkpoint
                    proc.process(b, decode)  # Spark delivers the uncommitted batch again
                if crashes.get(b) == "replay":
                    proc.process(b, decode)  # a retried batch in the same process
            proc.drain(lambda _b: True)
            assert not [k for k in armed if k[1] < len(batches)], "a planned crash did not happen"
        out = ds.dataset(tmp / "out", format="parquet").to_table() if (tmp / "out").exists() else None
        got: Counter[tuple[Any, ...]] = Counter()
        if out is not None and out.num_rows:
            got.update(zip(*[out.column(c).to_pylist() for c in COLUMNS], strict=True))
        expected = duckdb_answer(rows, tables)
        assert got == expected
        c = proc.counts()
        assert c.reconciled and c.waiting == 0 and c.records_in == len(rows)
        assert c.matched_source_rows == len({r[0] for r in expected})
        proc.op.store.close()  # type: ignore[union-attr]


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=4).filter(lambda s: sum(s) > 0),
    crashes=st.dictionaries(st.integers(0, 7), st.sampled_from(POINTS), max_size=3),
    step_rows=st.sampled_from([None, 70]),
    memory=st.sampled_from(["memory", "lsm"]),
)
def test_crashes_and_replays_long(
    sizes: list[int], crashes: dict[int, str], step_rows: int | None, memory: str
) -> None:
    test_crashes_and_replays_leave_exactly_the_duckdb_answer.hypothesis.inner_test(  # type: ignore[attr-defined]
        sizes, crashes, step_rows, memory
    )
