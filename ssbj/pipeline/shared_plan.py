"""``ssbj plan --config a.yaml b.yaml ...``: the sharing the ILP chooses for several jobs.

Reads each job file, counts its master table (one COUNT per master, as ``ssbj validate``
connects), plans b and w as ``ssbj run`` would, and hands the jobs to
:func:`ssbj.shared.model.optimize`; prints the chosen stores and the predicted cost next
to isolated execution.
"""

from __future__ import annotations

import json
from typing import Any

from ssbj.config import JobConfig, KafkaSource, load_config
from ssbj.core.costmodel import CostConstants, CostModel
from ssbj.pipeline.factory import MasterSource
from ssbj.planning import estimate_row_bytes, plan_join
from ssbj.shared.model import JobSketch, SharingPlan, optimize


def _stream_id(cfg: JobConfig) -> str:
    src = cfg.source
    if isinstance(src, KafkaSource):
        return f"kafka:{src.topic}"
    return f"files:{src.path}"


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
        stream=_stream_id(cfg),
        stream_key=cfg.join.stream_key,
        master=f"{cfg.master.display()}/{cfg.master.table}",
        master_key=cfg.master.key,
        rate=rate,
        v_s=v_s,
        master_rows=max(rows, 1),
        v_r=v_r,
        step_rows=max(int(w), 1),
        partition_rows=plan.partition_rows,
    )


def plan_configs(
    paths: list[str], rate: float, capacity: float | None, calibration: str | None
) -> tuple[SharingPlan, list[JobSketch]]:
    """Load the job files and solve the sharing ILP for them."""
    cfgs = [load_config(p) for p in paths]
    infos: dict[str, tuple[int, Any]] = {}
    jobs = []
    for cfg in cfgs:
        key = f"{cfg.master.display()}/{cfg.master.table}"
        if key not in infos:
            infos[key] = MasterSource(cfg).info()
        jobs.append(sketch(cfg, rate, infos[key]))
    model = CostModel(CostConstants.load(calibration)) if calibration else CostModel()
    return optimize(jobs, model, capacity=capacity), jobs


def report(plan: SharingPlan, jobs: list[JobSketch]) -> dict[str, Any]:
    """Return the plan as a JSON-ready dict."""
    sol = plan.solution
    return {
        "jobs": [j.__dict__ for j in jobs],
        "stores": plan.stores,
        "predicted": {
            "shared": {"cpu_core_seconds_per_second": plan.shared_cpu, "memory_bytes": plan.shared_memory},
            "isolated": {"cpu_core_seconds_per_second": plan.isolated_cpu, "memory_bytes": plan.isolated_memory},
            "stream_decodes": {"shared": plan.decodes_shared, "isolated": plan.decodes_isolated},
        },
        "ilp": {
            "variables": sol.variables,
            "constraints": sol.constraints,
            "build_seconds": sol.build_seconds,
            "solve_seconds": sol.solve_seconds,
            "status": sol.status,
        },
    }


def print_plan(plan: SharingPlan, jobs: list[JobSketch], as_json: bool) -> None:
    """Print the chosen sharing and the predicted costs."""
    doc = report(plan, jobs)
    if as_json:
        print(json.dumps(doc, indent=2, default=str))
        return
    print(f"{len(jobs)} jobs over {plan.decodes_shared} streams and {len({j.master for j in jobs})} master tables")
    for s in plan.stores:
        part = "one shard" if s["shards"] == 1 else f"{s['shards']} shards on {s['partitioned_on']}"
        jl = ", ".join(str(n) for n in s["jobs"])  # type: ignore[attr-defined]
        print(f"  shared scan of {s['master']} ({part}): {jl}")
    print("predicted (Eq. 1-2 with the cost model's constants):")
    print(f"  {'':10} {'CPU core-s/s':>14} {'memory':>12} {'decodes':>8}")
    print(f"  {'shared':10} {plan.shared_cpu:>14.4f} {plan.shared_memory / 1e6:>10.1f}MB {plan.decodes_shared:>8}")
    print(
        f"  {'isolated':10} {plan.isolated_cpu:>14.4f} {plan.isolated_memory / 1e6:>10.1f}MB {plan.decodes_isolated:>8}"
    )
    sol = plan.solution
    print(
        f"ILP: {sol.variables} variables, {sol.constraints} constraints, built in {sol.build_seconds * 1e3:.1f} ms, "
        f"solved in {sol.solve_seconds * 1e3:.1f} ms ({sol.status})"
    )
