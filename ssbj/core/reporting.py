"""What the operator reports: memory per component, one step's metrics, run totals."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ssbj.contracts import OperatorTotals
from ssbj.core import complete as CC
from ssbj.core.costmodel import StepCost, probed_hs
from ssbj.core.metrics import MemoryReport, StepMetrics
from ssbj.core.prefetch import prefetched_nbytes, read_seconds

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin

FSM_NAMES = {1: "incrementing", 2: "switching", 0: "phase-out", CC.TAKE_ALL: "take-all", CC.COMPLETE: "complete"}


def memory_report(op: SemiStreamJoin) -> MemoryReport:
    """Bytes per component (the stream buffer is reported but not part of the budget)."""
    return MemoryReport(
        h_s=op.hs.nbytes(),
        h_r=op.cache.nbytes(),
        queue=op.hs.queue.nbytes,
        disk_buffer=op._disk_buffer_bytes,
        switching_buffer=op._sb_bytes,
        key_table=op.stats.nbytes + op.interest.nbytes + op.doorkeeper.nbytes,
        stream_buffer=op._buffer_bytes,
        entries=max(op.hs.values, 0) + op.cache.values + op.cache.empty_values + op.stats.size,
        # the probes' temporaries and a rebuild's are never alive at once, nor an R-cycle start's
        # rebuild and the disk buffer (ssbj.core.budget.temporaries_reserve)
        transient=max(op._transient, op._switch_transient, op._start_transient - op._disk_buffer_bytes),
        prefetch=prefetched_nbytes(op.master),
        r_filter=op.rfilter.nbytes,
    )


def step_metrics(
    op: SemiStreamJoin,
    p: int,
    fsm: int,
    w_n: int,
    w_s: int,
    w_null: int,
    b: int,
    n_out: int,
    c_loop: float,
    io_s: float,
    cache_s: float,
    disk_s: float,
) -> StepMetrics:
    """Metrics of the step that just ended (its sizes, phase seconds, memory at its end)."""
    hs = probed_hs(op.hs.live, w_s, b)
    predicted = op.cost_model.c_loop(StepCost(b=b, w_n=w_n + w_null, w_s=w_s, n_out=n_out, hs=hs))
    done = op._c.served_cache + op._c.served_disk + op._c.served_lookup + op._c.null_keys
    mem = op.memory()
    op._peak = max(op._peak, mem.total)
    return StepMetrics(
        step=op._step - 1,
        r_cycle=op._rc,
        partition=p,
        partitions=op._k,
        # (every R-cycle counts, decides and phases out at once: one name for the three)
        fsm_state="per-value"
        if fsm == 2 and op._per_value_fsm()
        else FSM_NAMES.get(fsm, "meshjoin" if not op._use_cache else "warm-up"),
        w=w_n + w_s + w_null,
        w_n=w_n,
        w_s=w_s,
        null_keys=w_null,
        b=b,
        output_rows=n_out,
        c_loop_measured=c_loop,
        c_loop_predicted=predicted,
        io_seconds=read_seconds(op.master, io_s),  # the read itself, maybe done ahead in a thread
        read_wait_seconds=io_s,  # what this step waited for its partition
        cache_phase_seconds=cache_s,
        disk_phase_seconds=disk_s,
        service_rate=(w_n + w_s + w_null) / c_loop if c_loop > 0 else 0.0,
        cache_values=op.cache.values + op.cache.empty_values,
        cache_rows=op.cache.rows,
        cache_bytes=op.cache.row_nbytes(),
        hs_tuples=op.hs_tuples,
        chunk_bytes=op._chunk_bytes,
        served_cache_total=op._c.served_cache,
        served_disk_total=op._c.served_disk,
        completed_total=done,
        v_s=op._vs_avg,
        v_r=op._vr_avg,
        memory=mem,
    )


def operator_totals(op: SemiStreamJoin) -> OperatorTotals:
    """Run-level counters; ``tuples_in == matched + unmatched + waiting`` always holds."""
    c = op._c
    return OperatorTotals(
        tuples_in=c.tuples_in,
        matched_source_rows=c.matched,
        unmatched_source_rows=c.unmatched,
        waiting=op.waiting_tuples,
        null_keys=c.null_keys,
        served_by_cache=c.served_cache,
        served_by_disk=c.served_disk,
        output_rows=c.output_rows,
        steps=c.steps,
        r_cycles=op._rc,
        switched_in=c.switched_in,
        evicted=c.evicted,
        busy_seconds=c.busy_seconds,
        service_rate=(c.served_cache + c.served_disk + c.served_lookup + c.null_keys) / c.busy_seconds
        if c.busy_seconds
        else 0.0,
        cache_share=c.served_cache / max(1, c.served_cache + c.served_disk + c.served_lookup + c.null_keys),
        served_by_lookup=c.served_lookup,
    )
