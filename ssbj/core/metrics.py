"""Per-step metrics and the per-component memory report."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class MemoryReport:
    """Bytes held by each component of the operator."""

    h_s: int  # H_S: stream rows, their encoded keys and chain links, the value index
    h_r: int  # H_R: cached master rows, partition tags, value index, empty entries
    queue: int  # chunk records of Q
    disk_buffer: int  # the partition of R currently loaded, with its encoded keys
    switching_buffer: int  # s_B
    key_table: int  # value statistics (s_count of the candidates)
    stream_buffer: int  # input not yet read by the cache phase (outside the budget)
    entries: int  # join values tracked (H_S values, cached values, candidates)
    transient: int = 0  # per-step temporaries (probe results) alive at the end of the step
    prefetch: int = 0  # partitions of R read ahead, not yet in the disk buffer (ssbj.core.prefetch)
    r_filter: int = 0  # the R-filter of values with master rows (ssbj.core.rfilter), both bit arrays

    @property
    def total(self) -> int:
        """Budgeted bytes: every component but the stream buffer."""
        return (
            self.h_s
            + self.h_r
            + self.queue
            + self.disk_buffer
            + self.switching_buffer
            + self.key_table
            + self.transient
            + self.prefetch
            + self.r_filter
        )

    def to_dict(self) -> dict[str, int]:
        """Plain dict, with the total."""
        d = asdict(self)
        d["total"] = self.total
        return d


@dataclass(frozen=True)
class StepMetrics:
    """What one outer-loop iteration did and cost."""

    step: int
    r_cycle: int
    partition: int
    partitions: int
    fsm_state: str
    w: int  # stream tuples read this step (w_N + w_S + NULL keys)
    w_n: int  # served by the cache phase
    w_s: int  # forwarded to H_S
    null_keys: int
    b: int
    output_rows: int
    c_loop_measured: float
    c_loop_predicted: float
    io_seconds: float  # reading the step's partition (in the prefetch thread when it was read ahead)
    cache_phase_seconds: float
    disk_phase_seconds: float
    service_rate: float  # tuples/s of this step: w / c_loop
    cache_values: int
    cache_rows: int
    cache_bytes: int
    hs_tuples: int
    chunk_bytes: int
    served_cache_total: int
    served_disk_total: int
    completed_total: int
    v_s: float
    v_r: float
    memory: MemoryReport
    read_wait_seconds: float = 0.0  # what the step waited for its partition (io_seconds without prefetch)
    path: str = "scan"  # scan | lookup | lookup+scan | idle (hybrid step, docs/hybrid.md)
    lookup_tuples: int = 0  # H_S tuples finished by the lookup path this step
    lookup_keys: int = 0
    lookup_rows: int = 0
    lookup_seconds: float = 0.0
    served_lookup_total: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-ready)."""
        d = asdict(self)
        d["memory"] = self.memory.to_dict()
        return d
