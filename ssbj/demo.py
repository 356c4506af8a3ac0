"""``ssbj demo``: SSBJ vs MESHJOIN on generated skewed data, with the same memory budget."""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from ssbj.contracts import OperatorTotals
from ssbj.core import ArrowMaster, SemiStreamJoin, StepMetrics
from ssbj.core.feed import replay
from ssbj.errors import ConfigError, DependencyError
from ssbj.filejoin import DEFAULT_BATCH_ROWS, PROG, RunStats
from ssbj.files import one_line
from ssbj.planning import JoinPlan, JoinSettings, estimate_row_bytes, plan_join
from ssbj.units import fmt_bytes, parse_size

_ALGORITHMS: tuple[Literal["ssbj", "meshjoin"], ...] = ("ssbj", "meshjoin")


@dataclass
class _DemoRun:
    """Outcome of one algorithm in the demo."""

    algorithm: str
    enriched: int
    unmatched: int
    seconds: float
    totals: OperatorTotals
    stats: RunStats


def _demo_run(algorithm: str, stream: pa.Table, master: pa.Table, plan: JoinPlan, batch_rows: int) -> _DemoRun:
    """One algorithm over the demo data, counting (not keeping) the output."""
    op = SemiStreamJoin(plan.spec, ArrowMaster(master, plan.partition_rows), stream.schema, master.schema)
    stats = RunStats(keep_cycles=True)
    enriched = unmatched = 0
    t0 = time.perf_counter()
    for result in replay(op, stream.to_batches(max_chunksize=batch_rows)):
        stats.observe(result.metrics)
        enriched += result.enriched.num_rows
        unmatched += result.unmatched.num_rows
    return _DemoRun(algorithm, enriched, unmatched, time.perf_counter() - t0, op.totals(), stats)


def _cycle_line(m: StepMetrics) -> str:
    """One line per R-cycle: FSM state, cache size, H_S size."""
    return (
        f"  R-cycle {m.r_cycle:>4}  {m.fsm_state:<12}  cache {m.cache_values:>8,} values "
        f"{m.cache_rows:>8,} rows {fmt_bytes(m.cache_bytes):>9}   H_S {m.hs_tuples:>9,} tuples  "
        f"w {m.chunk_bytes:>10,} B/step"
    )


def cmd_demo(args: argparse.Namespace) -> int:
    """``ssbj demo``: SSBJ vs MESHJOIN on generated skewed data, same memory budget."""
    if args.rows < 1 or args.master_rows < 1:
        raise ConfigError("--rows and --master-rows must be >= 1")
    if args.skew < 0:
        raise ConfigError(f"--skew must be >= 0, got {args.skew}")
    if args.batch_rows < 1:
        raise ConfigError(f"--batch-rows must be >= 1, got {args.batch_rows}")
    budget = parse_size(args.memory)
    try:
        generate_synthetic = importlib.import_module("ssbj.bench.datagen").generate_synthetic
    except (ImportError, AttributeError) as exc:
        raise DependencyError(f"the demo needs ssbj.bench.datagen: {one_line(exc)}") from exc

    t0 = time.perf_counter()
    stream, master = generate_synthetic(args.master_rows, args.rows, args.skew, seed=args.seed)
    gen_s = time.perf_counter() - t0
    v_s = estimate_row_bytes(stream.schema, stream)
    v_r = estimate_row_bytes(master.schema, master)
    plans: dict[str, JoinPlan] = {
        a: plan_join(JoinSettings("sk", "mk", algorithm=a, memory_budget=budget), v_s, master.num_rows, v_r)
        for a in _ALGORITHMS
    }
    plan = plans["ssbj"].memory
    assert plan is not None  # noqa: S101
    print(
        f"{PROG} demo: R = {master.num_rows:,} master rows, {stream.num_rows:,} stream rows, "
        f"skew {args.skew:g}, generated in {gen_s:.1f} s"
    )
    print(
        f"memory budget {fmt_bytes(budget)}: b = {plan.partition_rows:,} master rows per "
        f"partition, k = {plan.partitions}, chunk {plan.chunk_bytes:,} B "
        f"(v_S = {v_s:.0f} B, v_R = {v_r:.0f} B)"
    )
    algorithms = list(_ALGORITHMS) if args.algorithm == "both" else [args.algorithm]
    runs = [_demo_run(a, stream, master, plans[a], args.batch_rows) for a in algorithms]
    print()
    for r in runs:
        t = r.totals
        print(
            f"{r.algorithm:<9} enriched {r.enriched:>12,}  unmatched {r.unmatched:>10,}  "
            f"cache share {t.cache_share:>6.1%}  service rate {t.service_rate:>12,.0f} "
            f"tuples/s  ({r.seconds:.1f} s, {t.steps:,} steps, {t.r_cycles:,} R-cycles, "
            f"peak memory {fmt_bytes(r.stats.peak.get('total', 0))})"
        )
    rc = 0
    if len(runs) == 2:
        ssbj_run, mesh_run = runs
        mu_mesh = float(mesh_run.totals.service_rate)
        ratio = float(ssbj_run.totals.service_rate) / mu_mesh if mu_mesh > 0 else math.inf
        print(f"service rate SSBJ / MESHJOIN: {ratio:.2f}x")
        if ssbj_run.enriched == mesh_run.enriched:
            print(f"check: both algorithms produced {ssbj_run.enriched:,} enriched rows")
        else:
            print(
                f"{PROG}: error: enriched row counts differ: ssbj {ssbj_run.enriched:,}, "
                f"meshjoin {mesh_run.enriched:,}",
                file=sys.stderr,
            )
            rc = 1
    for r in runs:
        cycles = sorted(r.stats.cycles)
        shown = cycles[: args.cycles] + ([cycles[-1]] if len(cycles) > args.cycles else [])
        print(f"\nper R-cycle ({r.algorithm}, last step of each; {len(cycles)} R-cycles):")
        for i, c in enumerate(shown):
            if i == args.cycles and len(cycles) > args.cycles + 1:
                print("  ...")
            print(_cycle_line(r.stats.cycles[c]))
    return rc


def add_demo_command(sub: Any) -> None:
    """Add ``ssbj demo`` to the ``ssbj`` sub-parsers."""
    demo = sub.add_parser(
        "demo",
        help="SSBJ vs MESHJOIN on generated data",
        description="Generate a skewed stream and master data in memory and run both algorithms.",
    )
    demo.add_argument("--rows", type=int, default=2_000_000, help="stream rows (default 2,000,000)")
    demo.add_argument("--master-rows", type=int, default=200_000, help="master rows R_t (default 200,000)")
    demo.add_argument("--skew", type=float, default=1.0, help="Zipf skew of the stream keys")
    demo.add_argument("--algorithm", choices=("both", "ssbj", "meshjoin"), default="both")
    demo.add_argument("--memory", default="8MB", help="memory budget of each run (default 8MB)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--batch-rows", type=int, default=DEFAULT_BATCH_ROWS)
    demo.add_argument("--cycles", type=int, default=6, help="R-cycles to print per algorithm (default 6)")
    demo.set_defaults(handler=lambda a, _extra: cmd_demo(a))
