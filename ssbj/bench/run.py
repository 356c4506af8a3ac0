"""One measured operator run: warm up, then measure whole R-cycles (see :mod:`ssbj.bench.harness`).

:func:`_run` is what every experiment and driver times: the stream pushed ahead of the
operator so that each step is saturated, steady-state R-cycles after a warm-up, the step
metrics summed, the memory breakdown averaged. R is the data set's table in memory unless a
``master_factory`` reads it from elsewhere (a database).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol

import pyarrow as pa

from ssbj.bench.datasets import Dataset
from ssbj.bench.presets import Json, Preset
from ssbj.contracts import MasterScan
from ssbj.core import ArrowMaster, CostModel, JoinSpec, SemiStreamJoin
from ssbj.core.budget import breakdown
from ssbj.core.costmodel import probed_hs
from ssbj.core.spec import Switching

ALGORITHMS = ("ssbj", "meshjoin")


class SchemaMaster(MasterScan, Protocol):
    """A master scan that knows its projected schema (ArrowMaster, SqlMasterScan)."""

    @property
    def schema(self) -> pa.Schema:
        """Arrow schema of the projected master columns."""
        ...


# R as a run reads it, given b: default the data set's table held in memory (ArrowMaster)
MasterFactory = Callable[[int], SchemaMaster]


# ---------------------------------------------------------------------------- runs
@dataclass(frozen=True)
class RunConfig:
    """One operator run: algorithm, b, and the H_S sizing (fixed chunk or memory budget)."""

    algorithm: str
    partition_rows: int
    chunk_bytes: int
    memory_budget: int | None = None
    switch_factor: float = 1.0
    refresh_cache: bool = True
    disk_chunk_rows: int | None = None  # the disk phase reads partitions in pieces of this many rows
    switching: Switching = "pipelined"  # JoinSpec.switching (SSBJ's FSM: per value or Algorithm 1's R-cycles)
    early_eviction: bool = True  # JoinSpec.early_eviction
    threads: int = 1  # JoinSpec.threads (the complete cache's probe and takes)


@dataclass
class _Acc:
    steps: int = 0
    w: int = 0
    w_n: int = 0
    w_s: int = 0
    nulls: int = 0
    out: int = 0
    c_loop: float = 0.0
    c_pred: float = 0.0
    mem: float = 0.0
    mem_max: int = 0
    tuple_mem: float = 0.0
    hs_tuples: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    breakdown: dict[str, float] = field(default_factory=dict)


def _run(
    ds: Dataset,
    cfg: RunConfig,
    p: Preset,
    model: CostModel,
    record_steps: bool = False,
    warm_cycles: int | None = None,
    measure_cycles: int | None = None,
    master_factory: MasterFactory | None = None,
) -> Json:
    """Warm up, then measure whole R-cycles of one algorithm on ``ds``; see the module doc.

    ``master_factory`` reads R from elsewhere (a database) instead of ``ds.master`` in memory.
    """
    if master_factory is None:
        master: SchemaMaster = ArrowMaster(ds.master, cfg.partition_rows)
    else:
        master = master_factory(cfg.partition_rows)
    try:
        return _measure(ds, cfg, p, model, master, record_steps, warm_cycles, measure_cycles)
    finally:
        close = getattr(master, "close", None)
        if close is not None:
            close()


def _measure(
    ds: Dataset,
    cfg: RunConfig,
    p: Preset,
    model: CostModel,
    master: SchemaMaster,
    record_steps: bool,
    warm_cycles: int | None,
    measure_cycles: int | None,
) -> Json:
    spec = JoinSpec(
        stream_key=ds.stream_key,
        master_key=ds.master_key,
        master_columns=ds.master_columns,
        algorithm="ssbj" if cfg.algorithm == "ssbj" else "meshjoin",
        switch_factor=cfg.switch_factor,
        chunk_bytes=cfg.chunk_bytes,
        max_step_tuples=p.max_step_tuples,
        memory_budget=cfg.memory_budget,
        refresh_cache=cfg.refresh_cache,
        disk_chunk_rows=cfg.disk_chunk_rows,
        switching=cfg.switching,
        early_eviction=cfg.early_eviction,
        threads=cfg.threads,
        # at least one stream tuple per step, however small the budget
        min_chunk_bytes=max(1, math.ceil(ds.v_s)),
    )
    op = SemiStreamJoin(spec, master, ds.stream_schema, master.schema, cost_model=model)
    batches = ds.batches(p.batch_rows, p.max_stream_rows)
    need = p.max_step_tuples
    exhausted = False
    push_wall = 0.0  # stream-buffer work (push) during the measured cycles
    push_cpu = 0.0
    timing = False

    def refill() -> bool:
        """Keep one full step in the stream buffer; data generation is not timed."""
        nonlocal exhausted, push_wall, push_cpu
        while op.buffered_tuples < need:
            b = next(batches, None)
            if b is None:
                exhausted = True
                return False
            t0 = time.perf_counter()
            c0 = time.process_time()
            op.push(b)
            if timing:
                push_wall += time.perf_counter() - t0
                push_cpu += time.process_time() - c0
        return True

    warm = (
        warm_cycles
        if warm_cycles is not None
        else (p.warm_cycles_ssbj if cfg.algorithm == "ssbj" else p.warm_cycles_mesh)
    )
    measure = measure_cycles if measure_cycles is not None else p.measure_cycles
    t_start = time.perf_counter()
    done = 0
    while done < warm and refill():
        m = op.step().metrics
        if m.partition == m.partitions - 1:
            done += 1
        if time.perf_counter() - t_start > 4 * p.max_run_seconds:
            break
    warm_done = done
    warm_seconds = time.perf_counter() - t_start

    acc = _Acc()
    last_chunk = cfg.chunk_bytes
    steps: list[Json] = []
    measured = 0
    partial = 0
    wall = 0.0
    cpu = 0.0
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    timing = True
    while measured < measure:
        if not refill():
            break
        t0 = time.perf_counter()
        c0 = time.process_time()
        res = op.step()
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        m = res.metrics
        acc.steps += 1
        acc.w += m.w
        acc.w_n += m.w_n
        acc.w_s += m.w_s
        acc.nulls += m.null_keys
        acc.out += m.output_rows
        acc.c_loop += m.c_loop_measured
        acc.c_pred += m.c_loop_predicted
        last_chunk = m.chunk_bytes
        mem = m.memory
        acc.mem += mem.total
        acc.mem_max = max(acc.mem_max, mem.total)
        acc.tuple_mem += mem.h_s + mem.h_r + mem.disk_buffer + mem.switching_buffer
        acc.hs_tuples += m.hs_tuples
        for k, v in mem.to_dict().items():
            acc.components[k] = acc.components.get(k, 0.0) + v
        for k, x in breakdown(op).items():
            acc.breakdown[k] = acc.breakdown.get(k, 0.0) + x
        if record_steps:
            steps.append(
                {
                    "step": m.step,
                    "r_cycle": m.r_cycle,
                    "fsm": m.fsm_state,
                    "b": m.b,
                    "w_n": m.w_n + m.null_keys,
                    "w_s": m.w_s,
                    "hs": probed_hs(m.hs_tuples, m.w_s, m.b),
                    "output_rows": m.output_rows,
                    "c_loop_measured": m.c_loop_measured,
                    "c_loop_predicted": m.c_loop_predicted,
                }
            )
        if m.partition == m.partitions - 1:
            measured += 1
            partial = 0
        else:
            partial += 1
        if wall > p.max_run_seconds and measured >= 1:
            break
    wall += push_wall
    cpu += push_cpu
    n = max(acc.steps, 1)
    totals = op.totals()
    return {
        "algorithm": cfg.algorithm,
        "config": asdict(cfg),
        "partitions": master.num_partitions(),
        "v_s": ds.v_s,
        "v_r": ds.v_r,
        "warm_cycles": warm_done,
        "warm_seconds": warm_seconds,
        "measured_cycles": measured + (partial / master.num_partitions() if partial else 0.0),
        "measured_steps": acc.steps,
        "measured_tuples": acc.w,
        "stream_exhausted": exhausted and measured < measure,
        "service_rate": acc.w / acc.c_loop if acc.c_loop > 0 else 0.0,
        "e2e_rate_wall": acc.w / wall if wall > 0 else 0.0,
        "e2e_rate_cpu": acc.w / cpu if cpu > 0 else 0.0,
        "busy_seconds": acc.c_loop,
        "push_wall_seconds": push_wall,
        "push_cpu_seconds": push_cpu,
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "cache_share": acc.w_n / acc.w if acc.w else 0.0,
        "disk_share": acc.w_s / acc.w if acc.w else 0.0,
        "output_rows": acc.out,
        "w_per_step": acc.w / n,
        "w_s_per_step": acc.w_s / n,
        "c_loop_mean": acc.c_loop / n,
        "c_loop_predicted_mean": acc.c_pred / n,
        "memory_mean": acc.mem / n,
        "memory_max": acc.mem_max,
        "memory_max_over_budget": acc.mem_max / cfg.memory_budget if cfg.memory_budget else None,
        "tuple_memory_mean": acc.tuple_mem / n,
        "hs_tuples_mean": acc.hs_tuples / n,
        "memory_components_mean": {k: v / n for k, v in acc.components.items()},
        "memory_breakdown_mean": {k: v / n for k, v in acc.breakdown.items()},
        "chunk_bytes_final": last_chunk,
        "r_filter": _filter_info(op),
        "empty_entries": op.cache.empties.size,
        "empty_entry_bytes": op.cache.empties.entry_bytes(),
        "loadavg_1m": load0,
        "totals": {k: (float(v) if isinstance(v, float) else int(v)) for k, v in totals.items()},
        **({"steps": steps} if record_steps else {}),
    }


def _filter_info(op: SemiStreamJoin) -> Json | None:
    """Return the R-filter answering at the end of the run (mode, expected false positive rate, bytes)."""
    f = op.rfilter.active
    if f is None:
        return None
    return {"mode": ("bitmap", "bloom")[f.mode - 1], "fpr": f.fpr, "nbytes": int(f.bits.nbytes), "bits": f.nbits}


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None
