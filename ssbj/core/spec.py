"""What to join and how (``JoinSpec``), what one step returns, and the run counters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa

from ssbj.core.keys import EncodedKeys
from ssbj.core.metrics import StepMetrics
from ssbj.errors import ConfigError

MAX_STEP_TUPLES = 1 << 20  # most stream tuples one step reads when w comes from the budget

Algorithm = Literal["ssbj", "meshjoin"]
Hybrid = Literal["off", "auto", "always", "index"]
RFilterMode = Literal["off", "auto", "always"]
Switching = Literal["pipelined", "paper"]


def master_output_names(stream_names: list[str], master_columns: list[str]) -> list[str]:
    """Names of the master columns in the output: ``_master`` is appended while a name is taken."""
    taken = set(stream_names)
    out = []
    for c in master_columns:
        name = c
        while name in taken:
            name = f"{name}_master"
        taken.add(name)
        out.append(name)
    return out


@dataclass(frozen=True)
class JoinSpec:
    """What to join and how.

    ``chunk_bytes`` bounds the bytes of stream tuples that enter H_S per step (w_S in
    bytes); ``memory_budget`` (bytes), when set, re-derives it at every R-cycle from the
    memory left after H_R, the disk buffer, s_B and the statistics, as the paper's
    "Adapt MESHJOIN setting w", and every structure is sized to fit.

    ``count_overheads``: the cache inequality compares the bytes each choice really
    takes (H_S's key, link and index share per tuple; H_R's partition tag per row and
    index entry per value; an empty entry's slot). ``False`` compares the row bytes
    alone, the paper's ``m * v_R < n * v_S``.

    ``refresh_cache``: every partition the disk phase reads also refreshes the cached
    rows read from it, so no cached row is older than one R-cycle (updates, inserts and
    deletes of master rows reach the cache phase). ``False`` skips that work: cached rows
    then stay as they were switched in until their value is evicted, which is exact only
    while the master data does not change.

    ``r_filter`` (SSBJ; :mod:`ssbj.core.rfilter`): a membership filter of R's join values
    answers tuples whose value has no master rows at once; ``auto`` adopts it when its
    bytes are fewer than the H_S bytes it saves, ``always`` whenever it can be built (for
    tests), ``off`` never.

    ``hybrid`` (docs/hybrid.md): with a master that can look rows up by key
    (:class:`ssbj.contracts.MasterLookup`), ``auto`` lets the cost model finish the
    tuples of H_S by a lookup of their keys instead of scanning on, step by step;
    ``always`` does so at every step (for tests); ``off`` only scans. ``index`` (SSBJ;
    :mod:`ssbj.core.indexmode`) never scans: misses are looked up at once, the cache
    inequality takes values into H_R with the rows looked up, and each step looks up again
    the cached values of its slice, so each is re-read once per R-cycle: ``index_cycle_tuples``
    stream tuples (default: twice what the budget holds as waiting tuples, about the scan's
    R-cycle at the same budget when the cache serves half the tuples).

    ``disk_chunk_rows``: the disk phase reads and probes each partition in pieces of at
    most this many rows, so the disk buffer holds one piece, not b rows, when the master
    can stream its partitions (:class:`ssbj.contracts.MasterChunks`); a master that
    cannot is read (and charged) whole. ``None``: whole partitions.

    ``complete_cache`` (SSBJ with a budget; :mod:`ssbj.core.complete`): when the budget
    holds all of R, one *take-all* R-cycle collects every uncached value's rows and the
    cache then holds all of R: a tuple whose value misses it finishes at once, unmatched
    (no master row as of the last read of its partition, at most one R-cycle old), and the
    disk phase only refreshes H_R, new values of R included. ``False``: values move into
    the cache one at a time through the switching FSM, as in Algorithm 1.

    ``switching`` (SSBJ): ``pipelined`` keeps the FSM per value (docs/architecture.md,
    departure 13): every R-cycle counts the rows of the candidates admitted since the last
    R-cycle start and decides the candidates counted through a whole R-cycle, and every
    R-cycle start is a phase-out, so a value switches two to three R-cycles after its
    admission; ``paper``: Algorithm 1's global incrementing, switching and phase-out R-cycles
    (three to six R-cycles).

    ``threads``: the complete cache's probe and its Arrow takes (:func:`ssbj.core.completephase.complete_phase`)
    run in slices on this many threads (:mod:`ssbj.core.lanes`); everything else is one
    thread. 1 where cores are already shared out (a Spark task slot per shard).

    ``unique_key_switch`` (SSBJ): when the master vouches that its key is unique
    (:class:`ssbj.contracts.MasterKeyUnique`, exact key types), every value has ``m <= 1``,
    so no R-cycle is spent counting rows: every R-cycle is a switching R-cycle, a value
    decides at its row whenever it became a candidate, and its phase-out comes at the next
    R-cycle start (the cache engages at the start of R-cycle 2). ``False``: the FSM of
    ``switching`` decides as for any key.

    ``early_eviction`` (SSBJ, per-value FSM): at the R-cycle starts between evictions, a
    cached value whose hits are clearly below break-even leaves at once (docs/architecture.md,
    departure 8); ``False``: only every ``eviction_interval`` R-cycles, as in Algorithm 1.
    """

    stream_key: str
    master_key: str
    master_columns: tuple[str, ...] | None = None
    algorithm: Algorithm = "ssbj"
    switch_factor: float = 1.0
    eviction_interval: int = 10
    chunk_bytes: int = 1 << 20
    max_step_tuples: int = MAX_STEP_TUPLES
    memory_budget: int | None = None
    min_chunk_bytes: int = 1
    count_overheads: bool = True
    refresh_cache: bool = True
    hybrid: Hybrid = "off"
    r_filter: RFilterMode = "auto"
    disk_chunk_rows: int | None = None
    complete_cache: bool = True
    unique_key_switch: bool = True
    switching: Switching = "pipelined"
    early_eviction: bool = True
    threads: int = 1
    index_cycle_tuples: int | None = None

    def __post_init__(self) -> None:
        if self.r_filter not in ("off", "auto", "always"):
            raise ConfigError(f"r_filter must be 'off', 'auto' or 'always', got {self.r_filter!r}")
        if self.hybrid not in ("off", "auto", "always", "index"):
            raise ConfigError(f"hybrid must be 'off', 'auto', 'always' or 'index', got {self.hybrid!r}")
        if self.hybrid == "index" and self.algorithm != "ssbj":
            raise ConfigError("hybrid 'index' caches through SSBJ's inequality: algorithm must be 'ssbj'")
        if self.switching not in ("pipelined", "paper"):
            raise ConfigError(f"switching must be 'pipelined' or 'paper', got {self.switching!r}")
        if self.algorithm not in ("ssbj", "meshjoin"):
            raise ConfigError(f"algorithm must be 'ssbj' or 'meshjoin', got {self.algorithm!r}")
        if self.switch_factor <= 0:
            raise ConfigError(f"switch_factor (s_f) must be > 0, got {self.switch_factor}")
        if self.eviction_interval < 1:
            raise ConfigError(f"eviction_interval must be >= 1, got {self.eviction_interval}")
        if self.chunk_bytes < 1 or self.max_step_tuples < 1:
            raise ConfigError("chunk_bytes and max_step_tuples must be >= 1")
        if self.disk_chunk_rows is not None and self.disk_chunk_rows < 1:
            raise ConfigError(f"disk_chunk_rows must be >= 1, got {self.disk_chunk_rows}")
        if self.threads < 1:
            raise ConfigError(f"threads must be >= 1, got {self.threads}")
        if self.index_cycle_tuples is not None and self.index_cycle_tuples < 1:
            raise ConfigError(f"index_cycle_tuples must be >= 1, got {self.index_cycle_tuples}")
        if self.memory_budget is not None and self.memory_budget < 1:
            raise ConfigError(f"memory_budget must be >= 1 byte, got {self.memory_budget}")


@dataclass
class StepResult:
    """Output of one step: enriched rows and stream rows that finished without a match."""

    enriched: pa.Table
    unmatched: pa.Table
    metrics: StepMetrics


@dataclass
class Counters:
    """Run-level counters, checkpointed with the state."""

    tuples_in: int = 0
    served_cache: int = 0  # tuples completed by the cache phase (matched or empty entry)
    served_disk: int = 0  # tuples completed by the disk phase (expired or removed from H_S)
    served_lookup: int = 0  # tuples completed by the lookup path of the hybrid step
    null_keys: int = 0
    matched: int = 0  # source tuples with at least one output row
    unmatched: int = 0
    output_rows: int = 0
    steps: int = 0
    switched_in: int = 0
    evicted: int = 0
    busy_seconds: float = 0.0
    extra: dict[str, int] = field(default_factory=dict)

    def bump(self, name: str, n: int = 1) -> None:
        """Add ``n`` to an extra counter."""
        self.extra[name] = self.extra.get(name, 0) + n


@dataclass
class Buffered:
    """A pushed batch in the stream buffer: rows, encoded keys, row bytes, read position."""

    table: pa.Table
    keys: EncodedKeys
    row_bytes: np.ndarray
    pos: int = 0
