"""The multi-way processor with two streams joined in a window, without Spark: crashes, replays; equal to DuckDB.

Each batch holds one landing file of each stream (as Spark's union of the two sources with
``max_files_per_trigger: 1`` delivers them), decoded by the job's own decoder. A crash is an
exception at a crash point; a new processor then reopens the checkpoint directory and the
batch comes again under the same id, as after SIGKILL and a restarted ``ssbj run``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import sqlalchemy as sa
from crash_faults import Crash, armed_crashes
from multiway_pipeline_data import load_masters, masters
from twostream_data import COLUMNS, duckdb_answer, job, late_ids, streams, write_landing

from ssbj.config import parse_multiway_config
from ssbj.core.checkpoint import DirectoryStore
from ssbj.errors import ConfigError
from ssbj.pipeline.multiway_job import MultiWayProcessor, build_multiway_processor
from ssbj.pipeline.multiway_masters import STREAM_TAG


def _raw(dirs: dict[str, Path], f: int) -> pa.Table:
    """Batch ``f``: file ``f`` of each stream, tagged with its stream, as the Spark union gives it."""
    tags, paths, contents = [], [], []
    for name, d in dirs.items():
        for p in sorted(d.glob("*.jsonl"))[f : f + 1]:
            tags.append(name)
            paths.append(str(p))
            contents.append(p.read_bytes())
    return pa.table({STREAM_TAG: tags, "path": paths, "content": pa.array(contents, pa.binary())})


def _setup(tmp: Path, **join: Any) -> tuple[Any, Any, Any, dict[str, Path]]:
    tables = masters(seed=31, customers=40)
    load_masters(sa.create_engine(f"sqlite:///{tmp / 'm.db'}"), {"customer": tables["customer"]})
    data = streams(seed=32)
    dirs = write_landing(tmp, data)
    cfg = parse_multiway_config(
        job(
            tmp,
            {"url": f"sqlite:///{tmp / 'm.db'}"},
            dirs,
            {"kind": "parquet", "path": str(tmp / "out")},
            {"kind": "parquet", "path": str(tmp / "dl")},
            join={"memory": "16MiB", "lateness": 10, **join},
        )
    )
    return cfg, data, tables["customer"], dirs


@pytest.mark.parametrize(
    ("crashes", "store", "step_rows"),
    [
        ({}, "memory", None),
        ({1: "after-sink", 3: "in-checkpoint"}, "memory", 50),
        ({0: "after-checkpoint", 2: "replay", 4: "after-decode"}, "lsm", None),
    ],
)
def test_two_streams_with_crashes_equal_duckdb_and_reconcile_per_stream(
    tmp_path: Path, crashes: dict[int, str], store: str, step_rows: int | None
) -> None:
    cfg, data, customer, dirs = _setup(tmp_path, store=store, step_rows=step_rows)

    def new() -> MultiWayProcessor:
        return build_multiway_processor(cfg, DirectoryStore(cfg.operator_checkpoint))

    proc = new()
    proc.open()
    decode = proc.query.stream_decoder()
    with armed_crashes(crashes) as armed:
        for b in range(len(data.files["orders"])):
            raw = _raw(dirs, b)
            try:
                proc.process(b, lambda raw=raw: decode(raw))
            except Crash:
                proc.op.store.close()  # type: ignore[union-attr]
                proc = new()
                proc.process(b, lambda raw=raw: decode(raw))
            if crashes.get(b) == "replay":
                proc.process(b, lambda raw=raw: decode(raw))
        proc.drain(lambda _b: True)
        assert not armed, "a planned crash did not happen"
    late = late_ids(data, step_rows=step_rows)
    assert late["orders"] and late["shipments"]
    expected = duckdb_answer(data, customer, late)
    out = ds.dataset(tmp_path / "out", format="parquet").to_table()
    got = Counter(zip(*[out.column(c).to_pylist() for c in COLUMNS], strict=True))
    assert sum(got.values()) == sum(expected.values()) > 0
    assert got == expected
    dl = ds.dataset(tmp_path / "dl", format="parquet").to_table().to_pylist()
    late_dl = [d for d in dl if d["reason"].startswith("late:")]
    bad = sum(data.bad.values())
    assert len(dl) == bad + len(late_dl)
    for name, p in (("orders", "o"), ("shipments", "s")):
        mine = [d for d in late_dl if f"stream {name} " in d["reason"]]
        assert {int(json.loads(d["payload"])[f"{p}_id"]) for d in mine} == late[name]
        for d in mine:  # the record's file and line: the payload is that line's record
            line = Path(d["file"]).read_bytes().split(b"\n")[d["line"] - 1]
            assert json.loads(line)[f"{p}_id"] == json.loads(d["payload"])[f"{p}_id"]
            assert d["position"] == f"{d['file']}:{d['line']}"
    c = proc.counts()
    records = sum(len(lines) for fs in data.files.values() for lines in fs)
    # what waits at the end of the run is the rows kept in the window (a next run may join them)
    kept = proc.op.window.waiting_rows  # type: ignore[union-attr]
    assert c.reconciled and c.waiting == kept > 0 and proc.op.waiting_rows == 0  # type: ignore[union-attr]
    assert c.records_in == records and c.dead_letters == len(dl)
    per = proc.stream_counts()
    for alias, name in (("o", "orders"), ("s", "shipments")):
        s = per[alias]
        assert s["stream"] == name and s["reconciled"]
        assert s["records_in"] == sum(len(lines) for lines in data.files[name])
        assert s["late"] == len(late[name])
    for alias, col in (("o", 0), ("s", 1)):  # kept rows that met a partner already are still waiting
        s = per[alias]
        assert s["output_source_rows"] <= len({r[col] for r in expected}) <= s["output_source_rows"] + s["waiting"]
    assert per["o"]["waiting"] + per["s"]["waiting"] == kept
    proc.op.store.close()  # type: ignore[union-attr]


def test_event_time_must_be_the_windows_column(tmp_path: Path) -> None:
    cfg, _, _, _ = _setup(tmp_path)
    bad = cfg.model_copy(update={"stream": cfg.stream.model_copy(update={"event_time": "o_id"})})
    with pytest.raises(ConfigError, match=r"event_time is 'o_id'.*o\.o_ts"):
        build_multiway_processor(bad, DirectoryStore(cfg.operator_checkpoint))
