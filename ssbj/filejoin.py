"""``ssbj join`` and ``ssbj plan``: the operator and Theorem 1's bound on a stream file and a master file.

``ssbj join`` replays a stream file (Parquet or CSV) through the operator as if it were
arriving, batch by batch, with a master file as R, and streams the enriched rows to a
Parquet file; ``--stats`` prints a JSON report with the bound next to what the run
achieved. ``ssbj plan`` prints the bound, the predicted cache share and rates and the
budget for a target rate before any run (or, with ``--config``, the sharing the ILP picks).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import pyarrow as pa

from ssbj.core import ArrowMaster, CostConstants, CostModel, MemoryPlan, SemiStreamJoin, StepMetrics
from ssbj.core.bound import KeyDistribution, advise, key_distribution
from ssbj.core.feed import replay
from ssbj.core.keys import check_compatible, encode_keys
from ssbj.errors import ConfigError, InputError
from ssbj.files import (
    check_key_column,
    check_output,
    file_format,
    master_schema,
    read_master,
    stream_batches,
    write_parquet_atomically,
)
from ssbj.pipeline import shared_plan
from ssbj.planning import DEFAULT_MEMORY, JoinSettings, check_key_types, estimate_row_bytes, plan_join
from ssbj.units import fmt_bytes, memory_arg, memory_bytes

PROG = "ssbj"
DEFAULT_BATCH_ROWS = 100_000


def parse_columns(text: str) -> list[str]:
    """Column names of ``--master-columns``: comma-separated, non-empty, no duplicates."""
    names = [c.strip() for c in text.split(",")]
    if not text.strip() or any(not c for c in names):
        raise ConfigError(f"bad --master-columns {text!r}: expected comma-separated column names such as c1,c2")
    dupes = sorted({c for c in names if names.count(c) > 1})
    if dupes:
        raise ConfigError(f"bad --master-columns {text!r}: column(s) {', '.join(dupes)} repeated")
    return names


@dataclass
class RunStats:
    """Per-step observations: c_loop predicted vs measured, memory peaks, R-cycle samples."""

    keep_cycles: bool = False
    measured: list[float] = field(default_factory=list)
    predicted: list[float] = field(default_factory=list)
    peak: dict[str, int] = field(default_factory=dict)
    cycles: dict[int, StepMetrics] = field(default_factory=dict)
    cycle_tuples: dict[int, int] = field(default_factory=dict)  # stream tuples read per R-cycle
    last_partition: int = -1

    def observe(self, m: StepMetrics) -> None:
        """Record one step."""
        self.cycle_tuples[m.r_cycle] = self.cycle_tuples.get(m.r_cycle, 0) + m.w
        self.last_partition = m.partition if m.partition == m.partitions - 1 else -1
        self.measured.append(m.c_loop_measured)
        self.predicted.append(m.c_loop_predicted)
        for name, value in m.memory.to_dict().items():
            if value > self.peak.get(name, -1):
                self.peak[name] = value
        if self.keep_cycles:
            self.cycles[m.r_cycle] = m  # the last step of each R-cycle wins

    def tuples_per_r_cycle(self) -> float | None:
        """Mean stream tuples per complete R-cycle after SSBJ's three warm-up cycles (if any)."""
        done = sorted(self.cycle_tuples)
        if self.last_partition < 0 and done:
            done = done[:-1]  # the last R-cycle did not complete
        steady = [c for c in done if c > 3] or done
        return statistics.fmean(self.cycle_tuples[c] for c in steady) if steady else None

    def c_loop_summary(self) -> dict[str, Any]:
        """Predicted (Eq. 2) vs measured seconds per step."""
        ratios = [m / p for m, p in zip(self.measured, self.predicted, strict=True) if p > 0]
        out: dict[str, Any] = {"steps": len(self.measured)}
        if self.measured:
            out["measured_mean_seconds"] = statistics.fmean(self.measured)
            out["predicted_mean_seconds"] = statistics.fmean(self.predicted)
        if ratios:
            out["ratio_measured_over_predicted"] = {
                "mean": statistics.fmean(ratios),
                "median": statistics.median(ratios),
                "min": min(ratios),
                "max": max(ratios),
            }
        return out


def _threads(text: str) -> int:
    """``--threads``: a positive count."""
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"--threads must be >= 1, got {n}")
    return n


def _plan_dict(plan: MemoryPlan, budget: int, v_s: float, v_r: float) -> dict[str, Any]:
    """Return the memory plan as a JSON-ready dict."""
    return {
        "budget_bytes": budget,
        "b": plan.partition_rows,
        "k": plan.partitions,
        "chunk_bytes": plan.chunk_bytes,
        "w_s": plan.w_s,
        "v_s_estimated": v_s,
        "v_r_estimated": v_r,
        "predicted_c_loop_seconds": plan.predicted_c_loop,
        "predicted_service_rate": plan.predicted_service_rate,
    }


def json_safe(obj: Any) -> Any:
    """Replace non-finite floats (not valid JSON) with None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj


def load_model(path: str | None) -> CostModel:
    """Cost model with the default constants or a calibration file."""
    return CostModel(CostConstants.load(path) if path else None)


def _open_inputs(
    args: argparse.Namespace, stream_path: Path, s_fmt: str, master_path: Path, m_fmt: str, batch_rows: int
) -> tuple[pa.Schema, Iterator[pa.Table], pa.Table, list[str]]:
    """Open the stream, check both keys and ``--master-columns``, read R projected (key first).

    Returns (stream schema, stream batches, R, projected master columns).
    """
    wanted = parse_columns(args.master_columns) if args.master_columns is not None else None
    stream_schema, batches = stream_batches(stream_path, batch_rows)
    m_schema, master_csv = master_schema(master_path, m_fmt)
    check_key_column(stream_schema, args.stream_key, "stream", stream_path)
    check_key_column(m_schema, args.master_key, "master", master_path)
    if wanted is not None:
        missing = [c for c in wanted if c not in m_schema.names]
        if missing:
            raise ConfigError(
                f"bad --master-columns: {', '.join(repr(c) for c in missing)} not in master file "
                f"{master_path}; available columns: {', '.join(m_schema.names)}"
            )
    check_key_types(stream_schema, args.stream_key, m_schema, args.master_key)
    proj = wanted if wanted is not None else list(m_schema.names)
    needed = [args.master_key] + [c for c in proj if c != args.master_key]
    return stream_schema, batches, read_master(master_path, m_fmt, needed, master_csv), proj


# ---------------------------------------------------------------------- ssbj plan
def cmd_plan(args: argparse.Namespace) -> int:
    """``ssbj plan``: the bound, the predicted cache share and rates, a budget for a target rate."""
    if args.config:
        plan, what_if, jobs = shared_plan.plan_configs(args.config, args.rate, args.capacity, args.calibration)
        shared_plan.print_plan(plan, what_if, jobs, args.json)
        return 0
    missing = [
        f"--{n.replace('_', '-')}" for n in ("stream", "master", "stream_key", "master_key") if not getattr(args, n)
    ]
    if missing:
        raise ConfigError(f"plan needs {', '.join(missing)} (or --config JOB.yaml ...)")
    memory = memory_arg(args.memory)
    stream_path, master_path = Path(args.stream), Path(args.master)
    s_fmt, m_fmt = file_format(stream_path, "stream"), file_format(master_path, "master")
    stream_schema, batches, master, proj = _open_inputs(
        args, stream_path, s_fmt, master_path, m_fmt, DEFAULT_BATCH_ROWS
    )
    sample = _KeySample(args.stream_key, args.sample_rows)
    first: pa.Table | None = None
    for t in batches:
        first = t if first is None else first
        sample.add(t)
        if sample.rows >= sample.limit:
            break
    if not sample.rows:
        raise InputError(f"stream file {stream_path} has no rows")
    v_s = estimate_row_bytes(stream_schema, first)
    v_r = estimate_row_bytes(master.select(proj).schema, master.select(proj))
    budget = memory_bytes(memory, master.num_rows, v_r)
    model = load_model(args.calibration)
    dist = _distribution(sample.column(), master, args.master_key)
    adv = advise(dist, budget, v_s, v_r, model, args.target_rate, chunked=True, resident=True)  # as `ssbj join` plans
    report = {
        "stream": str(stream_path),
        "master": str(master_path),
        "memory_bytes": budget,
        "v_s": v_s,
        "v_r": v_r,
        "master_rows": master.num_rows,
        "sampled_stream_rows": sample.rows,
        **adv.to_dict(),
    }
    if args.json:
        print(json.dumps(json_safe(report), indent=2, allow_nan=False))
        return 0
    b = adv.bound
    ratio = "unbounded (all of R fits: a main-memory hash join)" if b.all_of_r_fits else f"{b.ratio:.2f}x"
    lines = [
        f"{PROG} plan: R = {master.num_rows:,} rows (v_R {v_r:.1f} B), stream sample {sample.rows:,} rows "
        f"(v_S {v_s:.1f} B), memory {fmt_bytes(budget)}",
        f"  memory-optimal bound (Theorem 1): SSBJ/MESHJOIN tuples per R-cycle {ratio}, "
        f"cache share {b.cache_share:.1%} ({b.cached_values:,} values with rows cached, "
        f"{fmt_bytes(b.cache_bytes)})",
        f"  cost model: b = {adv.partition_rows:,} rows (k = {adv.partitions}), MESHJOIN "
        f"{adv.predicted_meshjoin_rate:,.0f} tuples/s, SSBJ up to {adv.predicted_ssbj_rate:,.0f} tuples/s "
        f"({adv.predicted_ratio:.2f}x)",
    ]
    if args.target_rate:
        rec = adv.recommended_budget
        lines.append(
            f"  for {args.target_rate:,.0f} tuples/s: "
            + (f"about {fmt_bytes(rec)} (predicted)" if rec else "not reachable below twice R's bytes")
        )
    print("\n".join(lines))
    return 0


# ---------------------------------------------------------------------- ssbj join
def cmd_join(args: argparse.Namespace) -> int:
    """``ssbj join``: enrich a stream file with a master file, write Parquet."""
    t_start = time.perf_counter()
    memory = memory_arg(args.memory)
    if args.batch_rows < 1:
        raise ConfigError(f"--batch-rows must be >= 1, got {args.batch_rows}")
    stream_path, master_path, out_path = Path(args.stream), Path(args.master), Path(args.out)
    s_fmt = file_format(stream_path, "stream")
    m_fmt = file_format(master_path, "master")
    check_output(out_path, [stream_path, master_path])
    model = load_model(args.calibration)

    stream_schema, batches, master, proj = _open_inputs(args, stream_path, s_fmt, master_path, m_fmt, args.batch_rows)

    first = next(batches, None)
    v_s = estimate_row_bytes(stream_schema, first)
    v_r = estimate_row_bytes(master.select(proj).schema, master.select(proj))
    budget = memory_bytes(memory, master.num_rows, v_r)
    settings = JoinSettings(
        stream_key=args.stream_key,
        master_key=args.master_key,
        master_columns=tuple(proj),
        algorithm=args.algorithm,
        memory_budget=budget,
        switch_factor=args.switch_factor,
        switching=args.switching,
        unique_key_switch=args.unique_key_switch,
        early_eviction=args.early_eviction,
        threads=args.threads,
        disk_chunks=True,  # an in-memory ArrowMaster hands partitions out in pieces
        resident_master=True,  # ... views probed in one pass
    )
    joined = plan_join(settings, v_s, master.num_rows, v_r, model)
    plan = joined.memory
    assert plan is not None  # noqa: S101  (b and w are both planned here)
    held = ArrowMaster(master, joined.partition_rows)
    master = held.table  # one chunk per column, a copy if the file's were several: not both kept
    op = SemiStreamJoin(joined.spec, held, stream_schema, master.schema, cost_model=model)
    stats = RunStats()
    feed: Iterator[pa.Table] = chain([first], batches) if first is not None else iter(())
    sample = _KeySample(args.stream_key)
    if args.stats:
        feed = sample.tap(feed)
    rows_written = _write_output(op, feed, out_path, stats)
    wall = time.perf_counter() - t_start
    totals = op.totals()

    if args.stats:
        report = {
            "command": "join",
            "algorithm": args.algorithm,
            "stream": str(stream_path),
            "master": str(master_path),
            "output": str(out_path),
            "rows_written": rows_written,
            "wall_seconds": wall,
            "totals": totals.to_dict(),
            "memory_plan": _plan_dict(plan, budget, v_s, v_r),
            "memory": {"budget_bytes": budget, "end": op.memory().to_dict(), "peak": stats.peak},
            "c_loop": stats.c_loop_summary(),
            "switching": {"fsm": args.switching, "unique_key": op.unique_key, "early_eviction": args.early_eviction},
            "threads": args.threads,
            "bound": _bound_report(sample, master, args.master_key, budget, v_s, v_r, model, stats, args.algorithm),
        }
        print(json.dumps(json_safe(report), indent=2, allow_nan=False))
    else:
        print(
            f"{PROG} join ({args.algorithm}): {totals.tuples_in:,} stream rows -> "
            f"{rows_written:,} enriched rows in {out_path} "
            f"({totals.matched_source_rows:,} matched, {totals.unmatched_source_rows:,} "
            f"unmatched); {wall:.2f} s, service rate {totals.service_rate:,.0f} tuples/s, "
            f"cache share {totals.cache_share:.1%}, memory {fmt_bytes(budget)} "
            f"(b={plan.partition_rows:,}, k={plan.partitions})"
        )
    return 0


class _KeySample:
    """The stream's join keys (the first ``limit`` rows) for the memory-optimal bound."""

    def __init__(self, key: str, limit: int = 1 << 22) -> None:
        self.key = key
        self.limit = limit
        self.parts: list[pa.ChunkedArray] = []
        self.rows = 0

    def add(self, t: pa.Table) -> None:
        """Keep the key column of ``t`` while under the limit."""
        if self.rows < self.limit and t.num_rows:
            col = t.column(self.key).slice(0, self.limit - self.rows)
            self.parts.append(col)
            self.rows += len(col)

    def tap(self, feed: Iterator[pa.Table]) -> Iterator[pa.Table]:
        """Pass ``feed`` through, sampling it."""
        for t in feed:
            self.add(t)
            yield t

    def column(self) -> pa.Array:
        """Return the sampled keys as one array."""
        return pa.chunked_array([c for p in self.parts for c in p.chunks]).combine_chunks()


def _distribution(stream_keys: pa.Array, master: pa.Table, master_key: str) -> KeyDistribution:
    """Empirical key distribution of the stream sample against R (NULL keys never match)."""
    family = check_compatible(stream_keys.type, master.schema.field(master_key).type)
    s = encode_keys(stream_keys, family)
    m = encode_keys(master.column(master_key), family)
    return key_distribution(s.values[s.valid], m.values[m.valid])


def _bound_report(
    sample: _KeySample,
    master: pa.Table,
    master_key: str,
    budget: int,
    v_s: float,
    v_r: float,
    model: CostModel,
    stats: RunStats,
    algorithm: str,
) -> dict[str, Any] | None:
    """Theorem 1's bound for this data and budget next to what the run achieved."""
    if not sample.rows:
        return None
    adv = advise(
        _distribution(sample.column(), master, master_key), budget, v_s, v_r, model, chunked=True, resident=True
    )
    n = stats.tuples_per_r_cycle()
    n_mesh = adv.bound.n_meshjoin
    achieved = n / n_mesh if n is not None and n_mesh > 0 else None
    out: dict[str, Any] = {
        **adv.to_dict(),
        "sampled_stream_rows": sample.rows,
        "achieved_tuples_per_r_cycle": n,
        # Theorem 1 bounds tuples held per R-cycle: N achieved over MESHJOIN's M / v_S
        "achieved_ratio": achieved,
        "efficiency": (
            achieved / adv.bound.ratio
            if achieved is not None and math.isfinite(adv.bound.ratio) and algorithm == "ssbj"
            else None
        ),
    }
    return out


def _write_output(op: SemiStreamJoin, feed: Iterator[pa.Table], out: Path, stats: RunStats) -> int:
    """Run the operator over ``feed``, streaming enriched rows to ``out``; rows written."""

    def enriched() -> Iterator[pa.Table]:
        for result in replay(op, feed):
            stats.observe(result.metrics)
            yield result.enriched

    return write_parquet_atomically(enriched(), op.output_schema, out, "--output")


# ---------------------------------------------------------------------- the parsers
def add_file_commands(sub: Any) -> None:
    """Add ``ssbj join`` and ``ssbj plan`` to the ``ssbj`` sub-parsers."""
    join = sub.add_parser(
        "join",
        help="enrich a stream file with a master file, write Parquet",
        description=(
            "Replay STREAM batch by batch through the operator with MASTER as R and write "
            "the enriched rows (all stream columns, then the master columns) to OUT."
        ),
    )
    join.add_argument("--stream", required=True, help="stream file (.parquet, .pq, .csv, .csv.gz)")
    join.add_argument("--master", required=True, help="master file (.parquet, .pq, .csv, .csv.gz)")
    join.add_argument("--stream-key", required=True, help="join key column of the stream")
    join.add_argument("--master-key", required=True, help="join key column of the master data")
    join.add_argument("--out", required=True, help="output Parquet file")
    join.add_argument("--algorithm", choices=("ssbj", "meshjoin"), default="ssbj")
    join.add_argument(
        "--memory",
        default=DEFAULT_MEMORY,
        help=(
            f"memory budget (default {DEFAULT_MEMORY}); kB/MB/GB/TB are powers of 1000, "
            "KiB/MiB/GiB/TiB powers of 1024, a bare number is bytes; 1%% is 1%% of R's projected bytes"
        ),
    )
    join.add_argument("--master-columns", help="comma-separated master columns to add (default: all)")
    join.add_argument("--stats", action="store_true", help="print a JSON report to stdout")
    join.add_argument(
        "--batch-rows",
        type=int,
        default=DEFAULT_BATCH_ROWS,
        help=f"stream rows per arriving batch (default {DEFAULT_BATCH_ROWS:,})",
    )
    join.add_argument("--switch-factor", type=float, default=1.0, help="cache switch factor s_f (default 1.0)")
    join.add_argument(
        "--switching",
        choices=("pipelined", "paper"),
        default="pipelined",
        help="SSBJ's switching FSM: per value (pipelined, default) or Algorithm 1's global R-cycles (paper)",
    )
    join.add_argument(
        "--no-unique-key-switch",
        dest="unique_key_switch",
        action="store_false",
        help="count rows even when the master's key is unique (by default such values are decided in one R-cycle)",
    )
    join.add_argument(
        "--no-early-eviction",
        dest="early_eviction",
        action="store_false",
        help="evict cached values only every eviction_interval R-cycles (by default clearly cold ones leave sooner)",
    )
    join.add_argument(
        "--threads",
        type=_threads,
        default=1,
        help="threads of the complete cache's probe and takes, when the budget holds all of R (default 1)",
    )
    join.add_argument("--calibration", help="cost-model constants (JSON from CostConstants.save)")
    join.set_defaults(handler=lambda a, _extra: cmd_join(a))

    plan = sub.add_parser(
        "plan",
        help="what SSBJ can buy on your data: bound, cache share, budget for a target rate",
        description=(
            "Compute Theorem 1's memory-optimal bound for STREAM (its join-key distribution) "
            "and MASTER at a memory budget, the cost model's predicted service rates, and the "
            "budget a target service rate needs; nothing is joined."
        ),
    )
    plan.add_argument("--config", nargs="+", help="job files: the sharing the ILP picks for them (docs/shared.md)")
    plan.add_argument(
        "--rate", type=float, help="with --config: stream tuples/s per source (default: what ssbj run assumes)"
    )
    plan.add_argument(
        "--capacity", type=float, help="with --config: also the ILP's what-if with shards, each carrying this core-s/s"
    )
    plan.add_argument("--stream", help="stream file (.parquet, .pq, .csv, .csv.gz)")
    plan.add_argument("--master", help="master file (.parquet, .pq, .csv, .csv.gz)")
    plan.add_argument("--stream-key", help="join key column of the stream")
    plan.add_argument("--master-key", help="join key column of the master data")
    plan.add_argument("--master-columns", help="comma-separated master columns to add (default: all)")
    plan.add_argument(
        "--memory", default=DEFAULT_MEMORY, help=f"memory budget (default {DEFAULT_MEMORY}; 1%% is 1%% of R's bytes)"
    )
    plan.add_argument("--target-rate", type=float, help="service rate (tuples/s) to find a budget for")
    plan.add_argument("--sample-rows", type=int, default=1 << 22, help="stream rows read (default 4,194,304)")
    plan.add_argument("--calibration", help="cost-model constants (JSON from CostConstants.save)")
    plan.add_argument("--json", action="store_true", help="print JSON")
    plan.set_defaults(handler=lambda a, _extra: cmd_plan(a))
