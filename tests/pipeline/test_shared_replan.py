"""The plan a shared application runs (ssbj plan = ssbj run), its budget split, and re-optimization on drift.

No Spark: the processor is driven call by call, with a clock the test moves, so the
measured rates (records per second of wall time) are what the test makes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from crash_faults import Crash, armed_crashes
from multijob_cases import JOBS, dead_letters, expected, job_config, land, output, write_masters

from ssbj.cli import main
from ssbj.errors import ConfigError
from ssbj.pipeline import multiconf
from ssbj.pipeline.multiprocessor import MultiProcessor
from ssbj.shared.model import JobSketch
from ssbj.shared.runplan import Assumed, run_plan

SHARED = {"memory": "1MiB", "drift": 0.2, "measure_calls": 2}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _cfg(root: Path, name: str, shared: dict[str, Any] | None = None) -> Any:
    key, how = JOBS[name][1], JOBS[name][5]
    return job_config(root, name, join={"stream_key": key, "type": how}, shared=shared or SHARED)


def _proc(root: Path, names: str, clock: Clock, shared: dict[str, Any] | None = None) -> MultiProcessor:
    p = MultiProcessor(multiconf.check([_cfg(root, n, shared) for n in names]), root / "app", clock=clock)
    p.open()
    return p


def _raw(path: Path) -> pa.Table:
    return pa.table({"path": [str(path)], "content": [path.read_bytes()]})


def _check(root: Path, name: str, files: list[Path], proc: MultiProcessor) -> None:
    want, dead = expected(root, name, files)
    got = output(root, name)
    assert sum(got.values()) == sum(want.values()), name
    assert got == want, name
    assert dead_letters(root, name) == dead, name
    c = proc.counts()[name]
    assert c.reconciled, c
    assert c.output_rows == sum(want.values())


def _groups(p: MultiProcessor) -> list[tuple[list[str], int, int | None]]:
    assert p.esj is not None
    return [
        (g.jobs, g.op.spec.max_step_tuples // len(g.streams), g.op.spec.memory_budget) for g in p.esj.current.groups
    ]


def _job_files(root: Path, cfgs: dict[str, Any]) -> list[str]:
    """Write each job's file as ``ssbj plan --config`` reads it; return the paths."""
    paths = []
    for n, c in cfgs.items():
        path = root / f"{n}.yaml"
        path.write_text(yaml.safe_dump(c.model_dump(mode="json", by_alias=True), sort_keys=False))
        paths.append(str(path))
    return paths


def test_the_printed_plan_is_the_plan_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_masters(tmp_path)
    paths = _job_files(tmp_path, {n: _cfg(tmp_path, n) for n in "abcd"})
    assert main(["plan", "--config", *paths, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)["run_plan"]
    p = _proc(tmp_path, "abcd", Clock())
    assert p.planner.plan is not None
    assert p.planner.plan.to_dict() == printed
    # the epoch runs the plan's groups, each with its w and its share of the budget
    want = [(g["jobs"], g["step_rows"], g["budget"]) for g in printed["groups"]]
    assert _groups(p) == want
    assert sorted(tuple(g[0]) for g in want) == [("a", "c", "d"), ("b",)]
    shares = sum(g["budget"] for g in printed["groups"]) + printed["store_budget"]
    assert shares <= 1 << 20  # one budget for the application, divided by the plan
    assert main(["plan", "--config", *paths]) == 0
    text = capsys.readouterr().out
    assert "application budget 1.0 MB (shared.memory)" in text and "shared scan of" in text


def test_the_split_follows_the_rates_and_refuses_a_budget_too_small() -> None:
    def job(name: str, stream: str, master: str) -> JobSketch:
        return JobSketch(name, stream, "k", master, "k", 1.0, 60.0, 100_000, 40.0, 10_000, 5_000)

    jobs = [job("a", "s1", "m1"), job("b", "s2", "m2"), job("c", "s2", "m1")]
    even = run_plan(jobs, Assumed({"s1": 1000.0, "s2": 1000.0}), 64 << 20)
    skew = run_plan(jobs, Assumed({"s1": 1000.0, "s2": 100_000.0}), 64 << 20)
    for plan in (even, skew):
        assert sum(g.budget or 0 for g in plan.groups) + plan.store_budget <= 64 << 20
    w = {g.master: g.step_rows for g in even.groups}
    ws = {g.master: g.step_rows for g in skew.groups}
    # m2 (only the fast stream) gains w against m1 (both streams): the scans' cost per second is rate / w
    assert ws["m2"] / ws["m1"] > 1.3 * w["m2"] / w["m1"]  # sqrt(100,000 / 50,500) = 1.41
    with pytest.raises(ConfigError, match="too small"):
        run_plan(jobs, Assumed({"s1": 1.0, "s2": 1.0}), 400_000)  # two disk buffers of 5,000 x 49 B


def test_jobs_of_one_application_must_agree_on_the_shared_section(tmp_path: Path) -> None:
    write_masters(tmp_path)
    with pytest.raises(ConfigError, match="shared differs"):
        multiconf.check([_cfg(tmp_path, "a"), _cfg(tmp_path, "b", {"memory": "2MiB"})])
    with pytest.raises(ConfigError, match=r"shared\.memory"):
        job_config(tmp_path, "a", shared={"memory": "1KiB"})


def _feed(p: MultiProcessor, clock: Clock, sid: str, files: list[Path], first: int, dt: float) -> None:
    for i, f in enumerate(files):
        clock.now += dt
        p.process(sid, first + i, lambda f=f: _raw(f))


def test_drift_switches_the_plan_mid_stream_and_every_job_stays_exact(tmp_path: Path) -> None:
    write_masters(tmp_path)
    orders = [land(tmp_path, "orders", f, 150) for f in range(8)]
    clicks = [land(tmp_path, "clicks", f, 120) for f in range(6)]
    clock = Clock()
    sid_o = multiconf.source_id(_cfg(tmp_path, "a"))
    sid_c = multiconf.source_id(_cfg(tmp_path, "c"))
    p = _proc(tmp_path, "abcd", clock)
    before = _groups(p)
    # only orders arrive, 150 records a second: far from the 10,000/s per source assumed
    _feed(p, clock, sid_o, orders[:3], 0, 1.0)
    assert p.planner.replans == 1 and len(p.esj.epochs()) == 2  # type: ignore[union-attr]
    after = _groups(p)
    assert [g[0] for g in after] == [g[0] for g in before] and after != before
    # restart: the re-optimized plan is in the checkpoint; then clicks arrive fast
    p = _proc(tmp_path, "abcd", clock)
    assert _groups(p) == after
    _feed(p, clock, sid_o, orders[3:5], 3, 1.0)
    for i, f in enumerate(clicks):
        clock.now += 0.01
        p.process(sid_c, i, lambda f=f: _raw(f))
        if i == 2:
            _feed(p, clock, sid_o, orders[5:], 5, 0.01)
    assert p.planner.replans >= 1
    assert p.last_progress["memory_bytes"] > 0
    p.drain()
    for n in "abd":
        _check(tmp_path, n, orders, p)
    _check(tmp_path, "c", clicks, p)


@pytest.mark.parametrize("point", ["after-decode", "after-sink", "in-checkpoint", "after-checkpoint"])
def test_a_death_inside_a_drift_switch_loses_and_repeats_nothing(tmp_path: Path, point: str) -> None:
    write_masters(tmp_path)
    orders = [land(tmp_path, "orders", f, 150) for f in range(6)]
    clock = Clock()
    sid = multiconf.source_id(_cfg(tmp_path, "a"))
    # c reads clicks, which never arrive: the customer scan's rate halves against the plan's
    p = _proc(tmp_path, "abc", clock)
    _feed(p, clock, sid, orders[:2], 0, 1.0)
    assert p.planner.replans == 0
    # the third call re-optimizes (two calls measured) and dies at ``point`` of its checkpoint id (2)
    clock.now += 1.0
    with armed_crashes({2: point}) as armed, pytest.raises(Crash):
        p.process(sid, 2, lambda: _raw(orders[2]))
    assert not armed
    assert p.planner.replans == 1  # the switch had happened in the process that died
    p = _proc(tmp_path, "abc", clock)
    if point == "after-checkpoint":  # committed: Spark replays the batch, which is skipped
        assert p.process(sid, 2, lambda: _raw(orders[2])) is None
        assert len(p.esj.epochs()) == 2  # type: ignore[union-attr]
    else:
        p.process(sid, 2, lambda: _raw(orders[2]))
    _feed(p, clock, sid, orders[3:], 3, 1.0)
    p.drain()
    for n in "ab":
        _check(tmp_path, n, orders, p)
    _check(tmp_path, "c", [], p)


def test_pooled_disk_buffers_give_a_shared_scan_its_jobs_rows_and_stay_exact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_masters(tmp_path)
    pooled = {**SHARED, "disk_buffer": "pooled"}
    cfgs = {n: _cfg(tmp_path, n, pooled) for n in "abcd"}
    by_master: dict[str, list[str]] = {}
    for n, c in cfgs.items():
        by_master.setdefault(multiconf.master_id(c), []).append(n)
    assert main(["plan", "--config", *_job_files(tmp_path, cfgs), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)["run_plan"]
    clock = Clock()
    p = _proc(tmp_path, "abcd", clock, pooled)
    assert p.planner.plan is not None and p.planner.plan.to_dict() == printed
    # each scan reads the rows of its jobs' own disk buffers together
    for mid, names in by_master.items():
        assert p.partition_rows[mid] == sum(cfgs[n].master.partition_rows or 0 for n in names)
        (group,) = [g for g in p.planner.plan.groups if sorted(g.jobs) == sorted(names)]
        assert group.partition_rows == p.partition_rows[mid]  # the plan prices the scan it runs
    assert sorted(len(v) for v in by_master.values()) == [1, 3]
    orders = [land(tmp_path, "orders", f, 150) for f in range(5)]
    clicks = [land(tmp_path, "clicks", f, 120) for f in range(3)]
    _feed(p, clock, multiconf.source_id(cfgs["a"]), orders, 0, 1.0)
    for i, f in enumerate(clicks):
        p.process(multiconf.source_id(cfgs["c"]), i, lambda f=f: _raw(f))
    p.drain()
    for n in "abd":
        _check(tmp_path, n, orders, p)
    _check(tmp_path, "c", clicks, p)
