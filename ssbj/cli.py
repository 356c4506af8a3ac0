"""The ``ssbj`` command line.

Every command, with the module that implements it:

* ``ssbj join``: enrich a stream file with a master file, write Parquet (here);
* ``ssbj plan``: Theorem 1's memory-optimal bound, predicted cache share and rates, and the
  budget for a target rate, before any run (here);
* ``ssbj demo``: SSBJ vs MESHJOIN on generated skewed data (here);
* ``ssbj bench``: the paper's experiments (:mod:`ssbj.bench.cli`);
* ``ssbj run``, ``ssbj validate``: run or check a streaming job file (:mod:`ssbj.pipeline.commands`);
* ``ssbj quickstart``: write a demo job (:mod:`ssbj.pipeline.quickstart`);
* ``ssbj sql``: print the warehouse DDL (:mod:`ssbj.warehouse`);
* ``ssbj check``, ``ssbj gate``, ``ssbj publish``, ``ssbj quarantine``: the quality gate on a
  run's rows (:mod:`ssbj.pipeline.quality`, :mod:`ssbj.pipeline.audit`);
* ``ssbj explain``, ``ssbj query``: a SQL query's plans, and a SELECT run through the multi-way
  operator (:mod:`ssbj.sql.cli`).
* ``ssbj maintain``: a continuous query kept exact under inserts and deletes (:mod:`ssbj.cq.cli`).

``ssbj join`` replays a stream file (Parquet or CSV) through the operator as if it were
arriving, batch by batch, with a master file as R, and streams the enriched rows to a
Parquet file.  Sizes given to ``--memory`` use SI units as decimal powers of 1000
(``kB``, ``MB``, ``GB``, ``TB``; ``k``, ``M``, ``G``, ``T`` alone mean the same) and IEC units
as binary powers of 1024 (``KiB``, ``MiB``, ``GiB``, ``TiB``); units are case-insensitive
and a bare number is bytes, so ``64MB`` is 64,000,000 bytes and ``64MiB`` 67,108,864.

Every error the user can fix (a missing file, a missing or mistyped key column, a bad
option value) is reported as one line ``ssbj: error: ...`` on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, Literal, NoReturn

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ssbj.contracts import OperatorTotals
from ssbj.core import (
    ArrowMaster,
    CostConstants,
    CostModel,
    MemoryPlan,
    SemiStreamJoin,
    StepMetrics,
)
from ssbj.core.bound import KeyDistribution, advise, key_distribution
from ssbj.core.keys import check_compatible, encode_keys
from ssbj.cq.cli import add_maintain_command
from ssbj.errors import ConfigError, DependencyError, InputError, ServiceError, SSBJError
from ssbj.files import check_output, file_format, read_error, rebatch
from ssbj.pipeline import shared_plan
from ssbj.pipeline.commands import add_commands
from ssbj.planning import DEFAULT_MEMORY, JoinPlan, JoinSettings, check_key_types, estimate_row_bytes, plan_join
from ssbj.sql.cli import add_sql_commands
from ssbj.units import parse_size

PROG = "ssbj"
_ALGORITHMS: tuple[Literal["ssbj", "meshjoin"], ...] = ("ssbj", "meshjoin")
DEFAULT_BATCH_ROWS = 100_000
_CSV_BLOCK_BYTES = 64 << 20  # CSV type inference looks at the first block only
_ROW_GROUP_ROWS = 1 << 17  # enriched rows buffered before a Parquet row group is written


class _UsageError(Exception):
    """A command-line syntax error found by argparse."""


class _Parser(argparse.ArgumentParser):
    """Argparse with one-line errors that ``main`` reports instead of exiting."""

    def error(self, message: str) -> NoReturn:
        """Raise instead of printing the usage and exiting."""
        raise _UsageError(f"{message} (see '{self.prog} --help')")


# ---------------------------------------------------------------------- small helpers
def _fmt_bytes(n: float) -> str:
    """Format a byte count in decimal units, e.g. ``8.0 MB``."""
    for unit, mult in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= mult:
            return f"{n / mult:.1f} {unit}"
    return f"{n:.0f} B"


def _one_line(exc: BaseException) -> str:
    """Return the message of an exception on one line."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _parse_columns(text: str) -> list[str]:
    """Column names of ``--master-columns``: comma-separated, non-empty, no duplicates."""
    names = [c.strip() for c in text.split(",")]
    if not text.strip() or any(not c for c in names):
        raise ConfigError(f"bad --master-columns {text!r}: expected comma-separated column names such as c1,c2")
    dupes = sorted({c for c in names if names.count(c) > 1})
    if dupes:
        raise ConfigError(f"bad --master-columns {text!r}: column(s) {', '.join(dupes)} repeated")
    return names


# ---------------------------------------------------------------------- input files
def _guarded(batches: Iterable[pa.RecordBatch], role: str, path: Path, fmt: str) -> Iterator[pa.RecordBatch]:
    """Re-raise read errors that happen mid-file as InputError."""
    try:
        yield from batches
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise read_error(role, path, fmt, exc) from exc


def _open_stream(path: Path, fmt: str, batch_rows: int) -> tuple[pa.Schema, Iterator[pa.Table]]:
    """Return the stream schema and an iterator of ``batch_rows``-row tables over the file."""
    try:
        if fmt == "parquet":
            pf = pq.ParquetFile(path)
            schema = pf.schema_arrow
            raw: Iterable[pa.RecordBatch] = pf.iter_batches(batch_size=batch_rows)
        else:
            reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=_CSV_BLOCK_BYTES))
            schema = reader.schema
            raw = reader
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise read_error("stream", path, fmt, exc) from exc
    return schema, rebatch(_guarded(raw, "stream", path, fmt), batch_rows)


def _master_schema(path: Path, fmt: str) -> tuple[pa.Schema, pa.Table | None]:
    """Return the master schema; a CSV master is read whole here (its types need all rows)."""
    try:
        if fmt == "parquet":
            return pq.read_schema(path), None
        table = pacsv.read_csv(path)
        return table.schema, table
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise read_error("master", path, fmt, exc) from exc


def _read_master(path: Path, fmt: str, columns: list[str], table: pa.Table | None) -> pa.Table:
    """Return the master table restricted to ``columns``."""
    try:
        if table is None:
            table = pq.read_table(path, columns=columns)
        return table.select(columns)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise read_error("master", path, fmt, exc) from exc


def _check_key(schema: pa.Schema, key: str, role: str, path: Path) -> None:
    """InputError naming the key and listing the columns if ``key`` is not in ``schema``."""
    if key not in schema.names:
        raise InputError(
            f"{role} key column {key!r} not found in {role} file {path}; "
            f"available columns: {', '.join(schema.names) or '(none)'}"
        )


# ---------------------------------------------------------------------- run bookkeeping
@dataclass
class _RunStats:
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


def _json_safe(obj: Any) -> Any:
    """Replace non-finite floats (not valid JSON) with None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return obj


def _load_model(path: str | None) -> CostModel:
    """Cost model with the default constants or a calibration file."""
    return CostModel(CostConstants.load(path) if path else None)


def _open_inputs(
    args: argparse.Namespace, stream_path: Path, s_fmt: str, master_path: Path, m_fmt: str, batch_rows: int
) -> tuple[pa.Schema, Iterator[pa.Table], pa.Table, list[str]]:
    """Open the stream, check both keys and ``--master-columns``, read R projected (key first).

    Returns (stream schema, stream batches, R, projected master columns).
    """
    wanted = _parse_columns(args.master_columns) if args.master_columns is not None else None
    stream_schema, batches = _open_stream(stream_path, s_fmt, batch_rows)
    master_schema, master_csv = _master_schema(master_path, m_fmt)
    _check_key(stream_schema, args.stream_key, "stream", stream_path)
    _check_key(master_schema, args.master_key, "master", master_path)
    if wanted is not None:
        missing = [c for c in wanted if c not in master_schema.names]
        if missing:
            raise ConfigError(
                f"bad --master-columns: {', '.join(repr(c) for c in missing)} not in master file "
                f"{master_path}; available columns: {', '.join(master_schema.names)}"
            )
    check_key_types(stream_schema, args.stream_key, master_schema, args.master_key)
    proj = wanted if wanted is not None else list(master_schema.names)
    needed = [args.master_key] + [c for c in proj if c != args.master_key]
    return stream_schema, batches, _read_master(master_path, m_fmt, needed, master_csv), proj


# ---------------------------------------------------------------------- ssbj plan
def _cmd_plan(args: argparse.Namespace) -> int:
    """``ssbj plan``: the bound, the predicted cache share and rates, a budget for a target rate."""
    if args.config:
        plan, jobs = shared_plan.plan_configs(args.config, args.rate, args.capacity, args.calibration)
        shared_plan.print_plan(plan, jobs, args.json)
        return 0
    missing = [
        f"--{n.replace('_', '-')}" for n in ("stream", "master", "stream_key", "master_key") if not getattr(args, n)
    ]
    if missing:
        raise _UsageError(f"plan needs {', '.join(missing)} (or --config JOB.yaml ...)")
    budget = parse_size(args.memory)
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
    model = _load_model(args.calibration)
    adv = advise(_distribution(sample.column(), master, args.master_key), budget, v_s, v_r, model, args.target_rate)
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
        print(json.dumps(_json_safe(report), indent=2, allow_nan=False))
        return 0
    b = adv.bound
    ratio = "unbounded (all of R fits: a main-memory hash join)" if b.all_of_r_fits else f"{b.ratio:.2f}x"
    lines = [
        f"{PROG} plan: R = {master.num_rows:,} rows (v_R {v_r:.1f} B), stream sample {sample.rows:,} rows "
        f"(v_S {v_s:.1f} B), memory {_fmt_bytes(budget)}",
        f"  memory-optimal bound (Theorem 1): SSBJ/MESHJOIN tuples per R-cycle {ratio}, "
        f"cache share {b.cache_share:.1%} ({b.cached_values:,} values with rows cached, "
        f"{_fmt_bytes(b.cache_bytes)})",
        f"  cost model: b = {adv.partition_rows:,} rows (k = {adv.partitions}), MESHJOIN "
        f"{adv.predicted_meshjoin_rate:,.0f} tuples/s, SSBJ up to {adv.predicted_ssbj_rate:,.0f} tuples/s "
        f"({adv.predicted_ratio:.2f}x)",
    ]
    if args.target_rate:
        rec = adv.recommended_budget
        lines.append(
            f"  for {args.target_rate:,.0f} tuples/s: "
            + (f"about {_fmt_bytes(rec)} (predicted)" if rec else "not reachable below twice R's bytes")
        )
    print("\n".join(lines))
    return 0


# ---------------------------------------------------------------------- ssbj join
def _cmd_join(args: argparse.Namespace) -> int:
    """``ssbj join``: enrich a stream file with a master file, write Parquet."""
    t_start = time.perf_counter()
    budget = parse_size(args.memory)
    if args.batch_rows < 1:
        raise ConfigError(f"--batch-rows must be >= 1, got {args.batch_rows}")
    stream_path, master_path, out_path = Path(args.stream), Path(args.master), Path(args.out)
    s_fmt = file_format(stream_path, "stream")
    m_fmt = file_format(master_path, "master")
    check_output(out_path, [stream_path, master_path])
    model = _load_model(args.calibration)

    stream_schema, batches, master, proj = _open_inputs(args, stream_path, s_fmt, master_path, m_fmt, args.batch_rows)

    first = next(batches, None)
    v_s = estimate_row_bytes(stream_schema, first)
    v_r = estimate_row_bytes(master.select(proj).schema, master.select(proj))
    settings = JoinSettings(
        stream_key=args.stream_key,
        master_key=args.master_key,
        master_columns=tuple(proj),
        algorithm=args.algorithm,
        memory_budget=budget,
        switch_factor=args.switch_factor,
        disk_chunks=True,  # an in-memory ArrowMaster hands partitions out in pieces
    )
    joined = plan_join(settings, v_s, master.num_rows, v_r, model)
    plan = joined.memory
    assert plan is not None  # noqa: S101  (b and w are both planned here)
    op = SemiStreamJoin(
        joined.spec,
        ArrowMaster(master, joined.partition_rows),
        stream_schema,
        master.schema,
        cost_model=model,
    )
    stats = _RunStats()
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
            "bound": _bound_report(sample, master, args.master_key, budget, v_s, v_r, model, stats, args.algorithm),
        }
        print(json.dumps(_json_safe(report), indent=2, allow_nan=False))
    else:
        print(
            f"{PROG} join ({args.algorithm}): {totals.tuples_in:,} stream rows -> "
            f"{rows_written:,} enriched rows in {out_path} "
            f"({totals.matched_source_rows:,} matched, {totals.unmatched_source_rows:,} "
            f"unmatched); {wall:.2f} s, service rate {totals.service_rate:,.0f} tuples/s, "
            f"cache share {totals.cache_share:.1%}, memory {_fmt_bytes(budget)} "
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
    stats: _RunStats,
    algorithm: str,
) -> dict[str, Any] | None:
    """Theorem 1's bound for this data and budget next to what the run achieved."""
    if not sample.rows:
        return None
    adv = advise(_distribution(sample.column(), master, master_key), budget, v_s, v_r, model)
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


def _write_output(op: SemiStreamJoin, feed: Iterator[pa.Table], out: Path, stats: _RunStats) -> int:
    """Run the operator over ``feed``, streaming enriched rows to ``out``; rows written."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.partial")
    rows = 0
    pending: list[pa.Table] = []
    pending_rows = 0
    try:
        try:
            writer = pq.ParquetWriter(tmp, op.output_schema)
        except (pa.ArrowException, OSError) as exc:
            raise ConfigError(f"cannot write --output {out}: {_one_line(exc)}") from exc
        with writer:
            for result in op.run(feed):
                stats.observe(result.metrics)
                n = result.enriched.num_rows
                if n:
                    pending.append(result.enriched)
                    pending_rows += n
                if pending_rows >= _ROW_GROUP_ROWS:
                    writer.write_table(pa.concat_tables(pending))
                    rows += pending_rows
                    pending, pending_rows = [], 0
            if pending:
                writer.write_table(pa.concat_tables(pending))
                rows += pending_rows
        os.replace(tmp, out)
    except OSError as exc:  # the file opened, then the disk or file system failed
        raise ServiceError(f"cannot write output {out}: {_one_line(exc)}") from exc
    finally:
        if tmp.exists():
            tmp.unlink()
    return rows


# ---------------------------------------------------------------------- ssbj demo
@dataclass
class _DemoRun:
    """Outcome of one algorithm in the demo."""

    algorithm: str
    enriched: int
    unmatched: int
    seconds: float
    totals: OperatorTotals
    stats: _RunStats


def _demo_run(algorithm: str, stream: pa.Table, master: pa.Table, plan: JoinPlan, batch_rows: int) -> _DemoRun:
    """One algorithm over the demo data, counting (not keeping) the output."""
    op = SemiStreamJoin(plan.spec, ArrowMaster(master, plan.partition_rows), stream.schema, master.schema)
    stats = _RunStats(keep_cycles=True)
    enriched = unmatched = 0
    t0 = time.perf_counter()
    for result in op.run(stream.to_batches(max_chunksize=batch_rows)):
        stats.observe(result.metrics)
        enriched += result.enriched.num_rows
        unmatched += result.unmatched.num_rows
    return _DemoRun(algorithm, enriched, unmatched, time.perf_counter() - t0, op.totals(), stats)


def _cycle_line(m: StepMetrics) -> str:
    """One line per R-cycle: FSM state, cache size, H_S size."""
    return (
        f"  R-cycle {m.r_cycle:>4}  {m.fsm_state:<12}  cache {m.cache_values:>8,} values "
        f"{m.cache_rows:>8,} rows {_fmt_bytes(m.cache_bytes):>9}   H_S {m.hs_tuples:>9,} tuples  "
        f"w {m.chunk_bytes:>10,} B/step"
    )


def _cmd_demo(args: argparse.Namespace) -> int:
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
        raise DependencyError(f"the demo needs ssbj.bench.datagen: {_one_line(exc)}") from exc

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
        f"memory budget {_fmt_bytes(budget)}: b = {plan.partition_rows:,} master rows per "
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
            f"peak memory {_fmt_bytes(r.stats.peak.get('total', 0))})"
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


# ---------------------------------------------------------------------- ssbj bench
def _cmd_bench(args: argparse.Namespace, extra: list[str]) -> int:
    """``ssbj bench``: delegate to :mod:`ssbj.bench.cli` (imported only here)."""
    try:
        bench_cli = importlib.import_module("ssbj.bench.cli")
    except ImportError as exc:
        raise DependencyError(
            f"the bench command needs the benchmark extras (pip install 'ssbj[bench]'): {_one_line(exc)}"
        ) from exc
    parser = _Parser(prog=f"{PROG} bench", description="Run the SSBJ / MESHJOIN benchmarks.")
    bench_cli.add_arguments(parser)
    bench_args = parser.parse_args(extra)
    rc = bench_cli.run(bench_args)
    return rc if isinstance(rc, int) else 0


# ---------------------------------------------------------------------- parser / main
def build_parser() -> argparse.ArgumentParser:
    """Build the ``ssbj`` argument parser."""
    parser = _Parser(
        prog=PROG,
        description="Semi-stream enrichment with SSBJ (Semi-Stream Balanced Join) and MESHJOIN.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
            "KiB/MiB/GiB/TiB powers of 1024, a bare number is bytes"
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
    join.add_argument("--calibration", help="cost-model constants (JSON from CostConstants.save)")
    join.set_defaults(handler=lambda a, _extra: _cmd_join(a))

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
    plan.add_argument("--rate", type=float, default=10_000.0, help="with --config: stream tuples/s per job")
    plan.add_argument("--capacity", type=float, default=1.0, help="with --config: core-s/s one shard can carry")
    plan.add_argument("--stream", help="stream file (.parquet, .pq, .csv, .csv.gz)")
    plan.add_argument("--master", help="master file (.parquet, .pq, .csv, .csv.gz)")
    plan.add_argument("--stream-key", help="join key column of the stream")
    plan.add_argument("--master-key", help="join key column of the master data")
    plan.add_argument("--master-columns", help="comma-separated master columns to add (default: all)")
    plan.add_argument("--memory", default=DEFAULT_MEMORY, help=f"memory budget (default {DEFAULT_MEMORY})")
    plan.add_argument("--target-rate", type=float, help="service rate (tuples/s) to find a budget for")
    plan.add_argument("--sample-rows", type=int, default=1 << 22, help="stream rows read (default 4,194,304)")
    plan.add_argument("--calibration", help="cost-model constants (JSON from CostConstants.save)")
    plan.add_argument("--json", action="store_true", help="print JSON")
    plan.set_defaults(handler=lambda a, _extra: _cmd_plan(a))

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
    demo.set_defaults(handler=lambda a, _extra: _cmd_demo(a))

    bench = sub.add_parser(
        "bench",
        help="benchmarks (needs the bench extras); 'ssbj bench --help' for options",
        add_help=False,
    )
    bench.set_defaults(handler=_cmd_bench, accepts_extra=True)

    add_commands(sub)
    add_sql_commands(sub)
    add_maintain_command(sub)
    return parser


def _error(message: str) -> int:
    """Print ``ssbj: error: message`` to stderr (one line per line of the message); the exit code 2."""
    lines = [" ".join(line.split()) if line.strip() else "" for line in message.splitlines()] or [""]
    first = lines[0]
    rest = "".join(f"\n  {line.strip()}" for line in lines[1:] if line)
    print(f"{PROG}: error: {first}{rest}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ssbj`` command; returns the exit code."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "accepts_extra", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        handler: Callable[[argparse.Namespace, list[str]], int] = args.handler
        return handler(args, extra)
    except _UsageError as exc:
        return _error(str(exc))
    except SSBJError as exc:
        return _error(str(exc))
    except SystemExit as exc:  # --help, or a delegated command exiting
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        return _error(str(exc.code))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
