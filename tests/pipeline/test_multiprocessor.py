"""The shared run without Spark: each job's output is its own batch join, across restarts, replays and switches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from multijob_cases import dead_letters, expected, job_config, land, output, write_job_file, write_masters

from ssbj.cli import main
from ssbj.errors import ConfigError
from ssbj.pipeline import multiconf
from ssbj.pipeline.multiprocessor import MultiProcessor


def _raw(path: Path) -> pa.Table:
    return pa.table({"path": [str(path)], "content": [path.read_bytes()]})


def _proc(root: Path, names: list[str]) -> MultiProcessor:
    p = MultiProcessor(multiconf.check([job_config(root, n) for n in names]), root / "app")
    p.open()
    return p


def _check(root: Path, name: str, files: list[Path], proc: MultiProcessor) -> None:
    want, dead = expected(root, name, files)
    got = output(root, name)
    assert sum(got.values()) == sum(want.values())
    assert got == want
    assert dead_letters(root, name) == dead
    c = proc.counts()[name]
    assert c.reconciled, c
    assert c.output_rows == sum(want.values())
    assert c.dead_letters == dead


def test_jobs_share_sources_and_scans_and_each_gets_its_batch_join(tmp_path: Path) -> None:
    write_masters(tmp_path)
    orders = [land(tmp_path, "orders", f, 150) for f in range(5)]
    clicks = [land(tmp_path, "clicks", f, 120) for f in range(3)]
    p = _proc(tmp_path, ["a", "b", "c", "d"])
    sid_o = multiconf.source_id(job_config(tmp_path, "a"))
    sid_c = multiconf.source_id(job_config(tmp_path, "c"))
    # one group per master and key: a, d (orders) and c (clicks) share the customer scan
    groups = [(g.master.split("/")[-1], sorted(g.jobs)) for g in p.esj.current.groups]  # type: ignore[union-attr]
    assert sorted(groups) == [("customer#ck", ["a", "c", "d"]), ("product#p_key", ["b"])]
    for i in range(5):
        p.process(sid_o, i, lambda i=i: _raw(orders[i]))
        if i < 3:
            p.process(sid_c, i, lambda i=i: _raw(clicks[i]))
    p.drain()
    for n in "abd":
        _check(tmp_path, n, orders, p)
    _check(tmp_path, "c", clicks, p)


def test_replay_restart_and_crash_between_sink_and_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_masters(tmp_path)
    orders = [land(tmp_path, "orders", f, 150) for f in range(4)]
    sid = multiconf.source_id(job_config(tmp_path, "a"))
    p = _proc(tmp_path, ["a", "b"])
    p.process(sid, 0, lambda: _raw(orders[0]))
    p.process(sid, 1, lambda: _raw(orders[1]))
    # restart: Spark replays batch 1, which the state already holds
    p = _proc(tmp_path, ["a", "b"])
    assert p.process(sid, 1, lambda: _raw(orders[1])) is None
    # batch 2 dies after its sink writes, before the checkpoint
    real = MultiProcessor._checkpoint

    def boom(self: MultiProcessor, cid: int) -> None:
        raise RuntimeError("killed")

    monkeypatch.setattr(MultiProcessor, "_checkpoint", boom)
    with pytest.raises(RuntimeError):
        p.process(sid, 2, lambda: _raw(orders[2]))
    monkeypatch.setattr(MultiProcessor, "_checkpoint", real)
    p = _proc(tmp_path, ["a", "b"])
    p.process(sid, 2, lambda: _raw(orders[2]))
    p.process(sid, 3, lambda: _raw(orders[3]))
    with pytest.raises(Exception, match="older than batch 3"):
        p.process(sid, 1, lambda: _raw(orders[1]))
    p.drain()
    for n in "ab":
        _check(tmp_path, n, orders, p)


def test_adding_and_removing_jobs_mid_stream(tmp_path: Path) -> None:
    write_masters(tmp_path)
    orders = [land(tmp_path, "orders", f, 150) for f in range(7)]
    clicks = [land(tmp_path, "clicks", f, 100) for f in range(2)]
    sid_o = multiconf.source_id(job_config(tmp_path, "a"))
    sid_c = multiconf.source_id(job_config(tmp_path, "c"))
    p = _proc(tmp_path, ["a", "b"])
    for i in range(3):
        p.process(sid_o, i, lambda i=i: _raw(orders[i]))
    assert p.counts()["b"].waiting > 0  # b is removed with tuples still waiting
    # restart with b removed, c (a new source) and d added: b's epoch drains beside the new one
    p = _proc(tmp_path, ["a", "d", "c"])
    assert p.switched and len(p.esj.epochs()) == 2  # type: ignore[union-attr]
    # the old epoch steps with the new one: a, d and c share the customer scan, whose full
    # step is 40 orders and 40 clicks, so a batch of 150 orders makes one or two steps
    for i in range(3, 7):
        p.process(sid_o, i, lambda i=i: _raw(orders[i]))
    p.process(sid_c, 0, lambda: _raw(clicks[0]))
    assert "b" not in p.known  # drained and dropped: its file is no longer needed
    # remove d again; a job whose file changed under the same name is refused
    with pytest.raises(ConfigError, match="give it a new name"):
        MultiProcessor(
            multiconf.check([job_config(tmp_path, "a", join={"stream_key": "cust", "step_rows": 7})]), tmp_path / "app"
        ).open()
    p = _proc(tmp_path, ["a", "c"])
    p.process(sid_c, 1, lambda: _raw(clicks[1]))
    p.drain()
    _check(tmp_path, "a", orders, p)
    _check(tmp_path, "b", orders[:3], p)
    _check(tmp_path, "d", orders[3:], p)
    _check(tmp_path, "c", clicks, p)


def test_incompatible_jobs_are_refused_with_every_reason(tmp_path: Path) -> None:
    a = job_config(tmp_path, "a")
    clash = job_config(
        tmp_path,
        "d",
        schema={"oid": "int64", "cust": "int64"},
        sink={"kind": "parquet", "path": str(tmp_path / "out" / "a")},
        trigger={"mode": "processing-time"},
    )
    with pytest.raises(ConfigError) as err:
        multiconf.check([a, clash, a])
    text = str(err.value)
    assert "two jobs are named 'a'" in text
    assert "different schemas" in text
    assert "trigger differs" in text
    assert "also written by a (sink)" in text


def test_cli_needs_a_checkpoint_for_several_files_and_reports_incompatible_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_masters(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "dead").mkdir()
    land(tmp_path, "orders", 0, 10)
    land(tmp_path, "clicks", 0, 10)
    a, c = write_job_file(tmp_path, "a"), write_job_file(tmp_path, "c")
    assert main(["run", "--config", str(a), str(c)]) == 2
    assert "give --checkpoint DIR" in capsys.readouterr().err
    assert main(["validate", str(a), str(c)]) == 0
    out = capsys.readouterr().out
    assert "shared scan" in out and "2 jobs: OK" in out
    assert main(["validate", str(a), str(a)]) == 2
    assert "two jobs are named 'a'" in capsys.readouterr().err


def test_a_removed_jobs_last_rows_are_in_an_audit_row(tmp_path: Path) -> None:
    import sqlite3

    from ssbj.pipeline.multijob import MultiJob

    write_masters(tmp_path)
    orders = [land(tmp_path, "orders", f, 150) for f in range(3)]
    wh = f"sqlite:///{tmp_path / 'wh.db'}"

    def cfg(n: str) -> Any:
        db = {"sink": {"kind": "database", "url": wh, "table": f"{n}_out"}}
        return job_config(tmp_path, n, dead_letter={"kind": "database", "url": wh, "table": f"{n}_dead"}, **db)

    sid = multiconf.source_id(cfg("a"))
    p = MultiProcessor(multiconf.check([cfg("a"), cfg("b")]), tmp_path / "app")
    p.open()
    for i in range(2):
        p.process(sid, i, lambda i=i: _raw(orders[i]))
    assert p.counts()["b"].waiting > 0
    # the next run has b removed: its old epoch drains and writes b's last rows in this run
    job = MultiJob([cfg("a")], tmp_path / "app", run_id="r2")
    job.processor.open()
    before = job.processor.counts()
    warehouses = job._begin_audit()
    assert sorted(warehouses) == ["a", "b"]
    job.processor.process(sid, 2, lambda: _raw(orders[2]))
    job.processor.drain()
    after = job.processor.counts()
    job._finish_audit(warehouses, before, after, 1.0)
    with sqlite3.connect(tmp_path / "wh.db") as db:
        rows = dict(db.execute("SELECT job, rows_enriched FROM ssbj_audit WHERE run_id = 'r2'").fetchall())
        b_rows = db.execute("SELECT COUNT(*) FROM b_out WHERE ssbj_batch_id >= 2").fetchone()[0]
    assert rows["b"] == after["b"].output_rows - before["b"].output_rows == b_rows > 0
