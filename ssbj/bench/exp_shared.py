"""Shared enrichment jobs (issue 14): the ILP's solve time, and shared vs isolated execution.

``shared_ilp``: the CLASH ILP (:mod:`ssbj.shared.ilp`) on random query sets as in the
seed's Section VII-C: 10 and 100 input relations of three attributes, 10-100 queries of
three relations, and bigger queries (four and five relations); solve time (HiGHS through
``scipy.optimize.milp``), model size, and the probe cost shared vs each query alone.

``shared_jobs``: 5 and 10 binary enrichment jobs over two streams (JSON-lines payloads,
as from Kafka) and three master tables in a SQLite file, run in this process once on the
shared operator (:class:`ssbj.shared.operator.SharedJoin`) and once isolated (one
:class:`~ssbj.core.operator.SemiStreamJoin` per job, each decoding its own stream and
scanning its own master table, as separate applications would), with the same b and w.
Throughput (stream tuples of all jobs per second, decoding included), peak memory of
the operator state, master rows read; every job's output of both runs is checked
against DuckDB's batch join of the decoded stream and the master table.

The data and jobs are in :mod:`ssbj.bench.shared_data`, the runs in
:mod:`ssbj.bench.shared_runs`. ``python -m ssbj.bench.exp_shared --out bench/shared`` runs both and writes
``results.json`` there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ssbj.bench.shared_data import Scale, jobs, make_masters, make_streams
from ssbj.bench.shared_runs import check_exact, predict, run_isolated, run_shared
from ssbj.shared import ilp
from ssbj.shared import randomqueries as rq

Json = dict[str, Any]

# ---------------------------------------------------------------------- ILP solve time


def exp_shared_ilp(reps: int = 3, log: Callable[[str], None] = print) -> Json:
    """Median build and solve time per setting over ``reps`` random query sets."""
    settings = [(10, nq, 3) for nq in (10, 25, 50, 75, 100)]
    settings += [(100, nq, 3) for nq in (10, 25, 50, 75, 100)]
    settings += [(10, 25, 4), (10, 50, 4), (100, 50, 4), (10, 20, 5), (100, 20, 5)]
    ilp.solve(ilp.build(rq.environment(10), rq.queries(rq.environment(10), 3)), rq.environment(10))  # warm-up
    points = []
    for n_rel, n_q, size in settings:
        runs: list[Json] = []
        for seed in range(reps):
            rels = rq.environment(n_rel, seed=seed)
            qs = rq.queries(rels, n_q, size, seed=seed + 100)
            prob = ilp.build(rels, qs)
            sol = ilp.solve(prob, rels, time_limit=60)
            iso = ilp.isolated_cost(rels, qs)
            runs.append(
                {
                    "queries": len(qs),
                    "variables": sol.variables,
                    "probe_orders": prob.orders,
                    "constraints": sol.constraints,
                    "build_ms": prob.build_seconds * 1e3,
                    "solve_ms": sol.solve_seconds * 1e3,
                    "total_ms": (prob.build_seconds + sol.solve_seconds) * 1e3,
                    "cost_shared": sol.cost,
                    "cost_isolated": iso,
                    "status": sol.status,
                }
            )
        p: Json = {
            "relations": n_rel,
            "queries": n_q,
            "relations_per_query": size,
            "median_total_ms": statistics.median(r["total_ms"] for r in runs),
            "median_solve_ms": statistics.median(r["solve_ms"] for r in runs),
            "median_variables": statistics.median(r["variables"] for r in runs),
            "cost_saving": 1 - sum(r["cost_shared"] for r in runs) / sum(r["cost_isolated"] for r in runs),
            "runs": runs,
        }
        points.append(p)
        log(
            f"  ILP {n_rel} relations, {n_q} queries of {size}: {p['median_total_ms']:.1f} ms "
            f"(solve {p['median_solve_ms']:.1f}), {p['median_variables']:.0f} variables, "
            f"probe cost -{p['cost_saving']:.0%} shared"
        )
    return {"points": points}


# ---------------------------------------------------------------------- jobs: shared vs isolated


def _median_run(runs: list[Json]) -> Json:
    """Return the run of median time (its outputs are checked; every run's time is kept)."""
    return dict(sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2])


def exp_shared_jobs(
    work_dir: Path, scale: Scale | None = None, seed: int = 0, reps: int = 3, log: Callable[[str], None] = print
) -> Json:
    """Shared vs isolated for 5 and 10 jobs; all outputs checked exact."""
    s = scale or Scale()
    work_dir.mkdir(parents=True, exist_ok=True)
    db = work_dir / "masters.db"
    make_masters(db, s, seed)
    payloads = make_streams(s, seed + 1)
    res: Json = {"scale": s.__dict__, "sets": {}}
    # warm-up: numba's cached kernels and the imports load once, outside every measurement
    small = Scale(tuples=2 * s.batch, batch=s.batch, partition_rows=s.partition_rows, master=s.master)
    for fn in (run_isolated, run_shared):
        fn(jobs(10), db, make_streams(small, seed + 2), small)
    for n in (5, 10):
        js = jobs(n)
        runs: dict[str, list[Json]] = {"isolated": [], "shared": [], "shared_pooled": []}
        for _ in range(reps):  # interleaved, so drift on the shared machine hits all alike
            runs["isolated"].append(run_isolated(js, db, payloads, s))
            runs["shared"].append(run_shared(js, db, payloads, s))
            runs["shared_pooled"].append(run_shared(js, db, payloads, s, pooled=True))
        iso = _median_run(runs["isolated"])
        sh = _median_run(runs["shared"])
        po = _median_run(runs["shared_pooled"])
        exact = {
            "isolated": check_exact(js, db, payloads, iso.pop("outputs")),
            "shared": check_exact(js, db, payloads, sh.pop("outputs")),
            "shared_pooled": check_exact(js, db, payloads, po.pop("outputs")),
        }
        iso["seconds_all_runs"] = [r["seconds"] for r in runs["isolated"]]
        sh["seconds_all_runs"] = [r["seconds"] for r in runs["shared"]]
        po["seconds_all_runs"] = [r["seconds"] for r in runs["shared_pooled"]]
        tuples = sum(s.tuples for _ in js)  # stream tuples each job consumes
        entry: Json = {
            "jobs": [j.spec.name for j in js],
            "isolated": {**iso, "throughput": tuples / iso["seconds"]},
            "shared": {**sh, "throughput": tuples / sh["seconds"]},
            "shared_pooled": {**po, "throughput": tuples / po["seconds"]},
            "exact": exact,
            "all_exact": all(e["exact"] for v in exact.values() for e in v),
            "predicted": predict(js, db, payloads, s),
            "ratios": {
                "throughput": iso["seconds"] / sh["seconds"],
                "memory": iso["peak_memory"] / sh["peak_memory"],
                "master_rows_read": iso["master_rows_read"] / max(1, sh["master_rows_read"]),
            },
            # each scan's disk buffer takes its jobs' b rows together (run_shared's `pooled`)
            "ratios_pooled": {
                "throughput": iso["seconds"] / po["seconds"],
                "memory": iso["peak_memory"] / po["peak_memory"],
                "master_rows_read": iso["master_rows_read"] / max(1, po["master_rows_read"]),
            },
        }
        res["sets"][str(n)] = entry
        r, rp = entry["ratios"], entry["ratios_pooled"]
        pr = entry["predicted"]
        log(
            f"  {n} jobs: throughput x{r['throughput']:.2f}, memory /{r['memory']:.2f}, "
            f"master rows read /{r['master_rows_read']:.2f}, exact: {entry['all_exact']}; "
            f"predicted (Eq. 1-2): CPU /{pr['cpu_ratio']:.2f}, memory /{pr['memory_ratio']:.2f}; "
            f"pooled buffers: throughput x{rp['throughput']:.2f}, memory /{rp['memory']:.2f}"
        )
    return res


def headline_ratios(jobs_res: Json) -> Json:
    """``ratios`` of results.json from a jobs run: shared, and shared with pooled disk buffers, over isolated."""
    five, ten = jobs_res["sets"]["5"], jobs_res["sets"]["10"]
    out: Json = {}
    for name, key in (("shared/isolated", "ratios"), ("shared_pooled/isolated", "ratios_pooled")):
        if key in five:
            out[name] = {
                "throughput": five[key]["throughput"],
                "memory": five[key]["memory"],
                "throughput_10_jobs": ten[key]["throughput"],
                "memory_10_jobs": ten[key]["memory"],
            }
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m ssbj.bench.exp_shared``: both experiments, results.json in --out."""
    ap = argparse.ArgumentParser(prog="python -m ssbj.bench.exp_shared", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/shared", help="directory for results.json (default bench/shared)")
    ap.add_argument("--work", default="bench/shared/data", help="directory for the generated data (not committed)")
    ap.add_argument("--tuples", type=int, default=Scale.tuples, help="tuples per stream")
    ap.add_argument("--reps", type=int, default=3, help="random query sets per ILP setting")
    ap.add_argument("--job-reps", type=int, default=3, help="runs of each mode per job set (median kept)")
    ap.add_argument("--only", choices=("ilp", "jobs"), help="run one of the two")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    doc: Json = json.loads(path.read_text()) if path.exists() else {}
    command = "python -m ssbj.bench.exp_shared " + " ".join(argv if argv is not None else sys.argv[1:])
    doc.pop("command", None)
    commands = doc.setdefault("commands", {})  # each part records the command that produced it
    if args.only in (None, "ilp"):
        print("ILP solve time (random query sets, seed 002 Section VII-C):")
        doc["ilp"] = exp_shared_ilp(args.reps)
        commands["ilp"] = command
    if args.only in (None, "jobs"):
        print("shared vs isolated jobs (in process, SQLite masters):")
        doc["jobs"] = exp_shared_jobs(Path(args.work), Scale(tuples=args.tuples), reps=args.job_reps)
        print("the same with the master tables held in memory (reads cost ~nothing):")
        doc["jobs_arrow_masters"] = exp_shared_jobs(
            Path(args.work), Scale(tuples=args.tuples, master="arrow"), reps=args.job_reps
        )
        commands["jobs"] = command
        doc["ratios"] = {**doc.get("ratios", {}), **headline_ratios(doc["jobs"])}
    path.write_text(json.dumps(doc, indent=2, default=str))
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
