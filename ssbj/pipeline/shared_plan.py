"""``ssbj plan --config a.yaml b.yaml ...``: the plan the shared application runs.

Reads each job file, counts its master table (one COUNT per master, as ``ssbj validate``
connects), plans b and w as ``ssbj run`` would, and makes the application's plan with
:func:`plan_for`, the very function ``ssbj run --config ...`` uses: the ILP's sharing
(:func:`ssbj.shared.model.optimize`, one shard: the application joins on the driver) and
``shared.memory`` split among the scan groups and the stream store
(:mod:`ssbj.shared.runplan`). Prints it with the predicted cost next to isolated
execution; ``--capacity`` adds the ILP's what-if with shards (not run by a shared run).
"""

from __future__ import annotations

import json
from typing import Any

from ssbj.config import JobConfig, load_config
from ssbj.core.costmodel import CostConstants, CostModel
from ssbj.pipeline import multiconf
from ssbj.pipeline.factory import MasterSource
from ssbj.planning import estimate_row_bytes, plan_join
from ssbj.shared.model import JobSketch, SharingPlan, optimize
from ssbj.shared.runplan import Assumed, RunPlan, run_plan

ASSUMED_RATE = 10_000.0  # tuples/s per source a new application's plan assumes until it has measured


def sketch(cfg: JobConfig, rate: float, master_info: tuple[int, Any]) -> JobSketch:
    """Return the optimizer's view of one job (b and w planned as the job itself would)."""
    rows, schema = master_info
    settings = cfg.join_settings(schema)
    v_s = estimate_row_bytes(cfg.stream_schema)
    v_r = estimate_row_bytes(schema)
    plan = plan_join(settings, v_s, rows, v_r)
    w = settings.step_rows or (plan.memory.w_s if plan.memory else plan.spec.max_step_tuples)
    return JobSketch(
        name=cfg.name,
        stream=multiconf.source_id(cfg),
        stream_key=cfg.join.stream_key,
        master=multiconf.master_id(cfg),
        master_key=cfg.master.key,
        rate=rate,
        v_s=v_s,
        master_rows=max(rows, 1),
        v_r=v_r,
        step_rows=max(int(w), 1),
        partition_rows=plan.partition_rows,
    )


def partition_rows_for(cfgs: list[JobConfig], info: tuple[int, Any]) -> int:
    """Return b of one master scan shared by ``cfgs`` (``shared.disk_buffer``).

    ``largest``: ``master.partition_rows``, else the largest b they plan alone; ``pooled``:
    the sum of each job's own b (its ``master.partition_rows`` or what it plans alone).
    """
    own = [c.master.partition_rows or sketch(c, 1.0, info).partition_rows for c in cfgs]
    if cfgs[0].shared.disk_buffer == "pooled":
        return sum(own)
    return cfgs[0].master.partition_rows or max(own)


def plan_for(
    cfgs: list[JobConfig],
    infos: dict[str, tuple[int, Any]],
    partition_rows: dict[str, int],
    assumed: Assumed | None,
    model: CostModel,
) -> RunPlan:
    """Return the application's plan for ``cfgs`` (``infos``, ``partition_rows``: per master id); see the module doc."""
    # each job keeps its own b (the isolated prediction's); a store has its scan's (partition_rows)
    jobs = [sketch(c, ASSUMED_RATE, infos[multiconf.master_id(c)]) for c in cfgs]
    if assumed is None:
        assumed = Assumed({j.stream: ASSUMED_RATE for j in jobs})
    caps = [c.join.step_rows for c in cfgs]
    cap = min(int(x) for x in caps if x) if all(caps) else None
    app = cfgs[0].shared.memory
    # without shared.memory: each group gets the largest join.memory, unless every job fixes w
    fallback = None if cap is not None else max(c.join.memory for c in cfgs)
    return run_plan(jobs, assumed, app, model, step_cap=cap, fallback_budget=fallback, scan_rows=partition_rows)


def plan_configs(
    paths: list[str], rate: float | None, capacity: float | None, calibration: str | None
) -> tuple[RunPlan, SharingPlan | None, list[JobSketch]]:
    """Load the job files; return the application's plan, the what-if with shards (``capacity``), the jobs."""
    cfgs = [load_config(p) for p in paths]
    multiconf.check(cfgs, "the job files")
    infos: dict[str, tuple[int, Any]] = {}
    by_master: dict[str, list[JobConfig]] = {}
    for cfg in cfgs:
        mid = multiconf.master_id(cfg)
        by_master.setdefault(mid, []).append(cfg)
        if mid not in infos:
            infos[mid] = MasterSource(cfg).info()
    rows = {mid: partition_rows_for(cs, infos[mid]) for mid, cs in by_master.items()}
    model = CostModel(CostConstants.load(calibration)) if calibration else CostModel()
    assumed = None if rate is None else Assumed({multiconf.source_id(c): rate for c in cfgs})
    plan = plan_for(cfgs, infos, rows, assumed, model)
    assert plan.sharing is not None  # noqa: S101 - run_plan always sets it
    jobs = _sketches(cfgs, infos, plan)
    what_if = None
    if capacity is not None:
        what_if = optimize(jobs, model, capacity=capacity, scan_rows=rows)
    return plan, what_if, jobs


def _sketches(cfgs: list[JobConfig], infos: dict[str, tuple[int, Any]], plan: RunPlan) -> list[JobSketch]:
    """Return the jobs at the plan's rates, each with its own b."""
    out = []
    for c in cfgs:
        mid, sid = multiconf.master_id(c), multiconf.source_id(c)
        out.append(sketch(c, plan.assumed.rates.get(sid, ASSUMED_RATE), infos[mid]))
    return out


def report(plan: RunPlan, what_if: SharingPlan | None, jobs: list[JobSketch]) -> dict[str, Any]:
    """Return the plan as a JSON-ready dict."""
    sharing = plan.sharing
    assert sharing is not None  # noqa: S101
    sol = sharing.solution
    doc: dict[str, Any] = {
        "jobs": [j.__dict__ for j in jobs],
        "run_plan": plan.to_dict(),
        "stores": sharing.stores,
        "predicted": {
            "shared": {"cpu_core_seconds_per_second": sharing.shared_cpu, "memory_bytes": sharing.shared_memory},
            "isolated": {"cpu_core_seconds_per_second": sharing.isolated_cpu, "memory_bytes": sharing.isolated_memory},
            "stream_decodes": {"shared": sharing.decodes_shared, "isolated": sharing.decodes_isolated},
        },
        "ilp": {
            "variables": sol.variables,
            "constraints": sol.constraints,
            "build_seconds": sol.build_seconds,
            "solve_seconds": sol.solve_seconds,
            "status": sol.status,
        },
    }
    if what_if is not None:
        doc["with_shards"] = {"stores": what_if.stores, "cpu_core_seconds_per_second": what_if.shared_cpu}
    return doc


def print_plan(plan: RunPlan, what_if: SharingPlan | None, jobs: list[JobSketch], as_json: bool) -> None:
    """Print the application's plan and the predicted costs."""
    doc = report(plan, what_if, jobs)
    if as_json:
        print(json.dumps(doc, indent=2, default=str))
        return
    sharing = plan.sharing
    assert sharing is not None  # noqa: S101
    print(f"{len(jobs)} jobs over {sharing.decodes_shared} streams and {len({j.master for j in jobs})} master tables")
    budget = "none (shared.memory not set)" if plan.budget is None else f"{plan.budget / 1e6:.1f} MB (shared.memory)"
    print(f"the application runs (application budget {budget}):")
    for g in plan.groups:
        mem = "no budget" if g.budget is None else f"budget {g.budget / 1e6:.2f} MB"
        rows = "rows in its H_S" if g.inline else f"stream store ~{g.store_bytes / 1e6:.2f} MB"
        b = "" if g.partition_rows is None else f"b {g.partition_rows:,} rows, "
        print(f"  shared scan of {g.master}: {', '.join(g.jobs)}; {b}w {g.step_rows:,} per stream, {mem}, {rows}")
    rates = ", ".join(f"{s} {r:,.0f}/s" for s, r in plan.assumed.rates.items())
    print(f"  assumed rates: {rates}")
    print("predicted (Eq. 1-2 with the cost model's constants):")
    print(f"  {'':10} {'CPU core-s/s':>14} {'memory':>12} {'decodes':>8}")
    print(
        f"  {'shared':10} {sharing.shared_cpu:>14.4f} {sharing.shared_memory / 1e6:>10.1f}MB "
        f"{sharing.decodes_shared:>8}"
    )
    print(
        f"  {'isolated':10} {sharing.isolated_cpu:>14.4f} {sharing.isolated_memory / 1e6:>10.1f}MB "
        f"{sharing.decodes_isolated:>8}"
    )
    sol = sharing.solution
    print(
        f"ILP: {sol.variables} variables, {sol.constraints} constraints, built in {sol.build_seconds * 1e3:.1f} ms, "
        f"solved in {sol.solve_seconds * 1e3:.1f} ms ({sol.status})"
    )
    if what_if is not None:
        print(f"with shards in the executors (--capacity; a shared run has none): {what_if.shared_cpu:.4f} core-s/s")
        for s in what_if.stores:
            part = "one shard" if s["shards"] == 1 else f"{s['shards']} shards on {s['partitioned_on']}"
            jl = ", ".join(str(n) for n in s["jobs"])  # type: ignore[attr-defined]
            print(f"  shared scan of {s['master']} ({part}): {jl}")
