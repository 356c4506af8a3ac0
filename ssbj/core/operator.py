"""The semi-stream join operator: MESHJOIN disk phase with the SSBJ cache phase in front.

One call to :meth:`SemiStreamJoin.step` is one iteration of the outer loop of Algorithm 1
of the SSBJ paper (Naeem, Weber, Lutteroth, DAPD 2018):

1. housekeeping at a new R-cycle (lines 3-14): the FSM state from the R-cycle counter
   ``rc``, cache eviction every ``eviction_interval`` R-cycles (lines 42-51, done here so
   H_R is rebuilt once), in the phase-out state the switching buffer s_B moves into H_R,
   s_count is reset, and w is adapted to the memory budget;
2. the cache phase (lines 15-23): up to w stream tuples are probed in H_R; hits are
   output, misses form the new chunk of H_S and Q;
3. the disk phase (lines 24-38): the next partition of R is read into the disk buffer
   and probes H_S (:mod:`ssbj.core.diskphase`), with the incrementing and switching
   instrumentation; cached rows read from that partition are refreshed;
4. expiry (lines 39-41): the oldest chunk, which has now met every partition of R,
   leaves H_S and Q; a tuple leaving unmatched shows that its value has no master rows.

This module orchestrates; each phase and structure lives in its own module: the new
R-cycle in :mod:`ssbj.core.rcycle`, the cache phase in :mod:`ssbj.core.cachephase`, the disk phase and expiry in
:mod:`ssbj.core.diskphase`, switch-in, empty entries and H_R rebuilds in
:mod:`ssbj.core.switching`; H_S and Q in :mod:`ssbj.core.hs`, H_R in
:mod:`ssbj.core.cache`, the value statistics in :mod:`ssbj.core.stats`, the disk phase's
filter in :mod:`ssbj.core.interest`, the memory budget in :mod:`ssbj.core.budget`,
checkpoints in :mod:`ssbj.core.persist`, Theorem 1 in :mod:`ssbj.core.bound`.
Departures from the pseudocode are listed in ``docs/architecture.md``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.contracts import MasterKeyUnique, OperatorTotals
from ssbj.core import budget as B
from ssbj.core import cachephase as CP
from ssbj.core import complete as CC
from ssbj.core import completephase as CPC
from ssbj.core import diskphase as DP
from ssbj.core import expiry as EX
from ssbj.core import indexmode as IX
from ssbj.core import lookupphase as LP
from ssbj.core import persist
from ssbj.core import rcycle as RC
from ssbj.core import reporting as RP
from ssbj.core import switchroom as SR
from ssbj.core.arrowtypes import plain_schema
from ssbj.core.cache import Cache
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.costmodel import CostModel
from ssbj.core.doorkeeper import Doorkeeper
from ssbj.core.hs import SWITCHING, StreamTable, ring_key_bytes
from ssbj.core.interest import Interest
from ssbj.core.keys import check_compatible, encode_keys, is_exact, needs_verification
from ssbj.core.master import MasterScan
from ssbj.core.metrics import MemoryReport
from ssbj.core.pathcost import PathCosts
from ssbj.core.prefetch import read_seconds
from ssbj.core.resident import ReadMemo
from ssbj.core.rfilter import RFilter
from ssbj.core.rowsize import row_nbytes
from ssbj.core.spec import Algorithm, Buffered, Counters, JoinSpec, StepResult, master_output_names
from ssbj.core.stats import ValueStats
from ssbj.errors import ConfigError, InputError

__all__ = ["Algorithm", "JoinSpec", "SemiStreamJoin", "StepResult", "master_output_names"]


def _fixed_width(t: pa.DataType) -> bool:
    """Whether a column of this type takes the same bytes for every row (its nbytes grows with rows alone)."""
    try:
        return bool(t.bit_width) and not pa.types.is_dictionary(t)
    except ValueError:
        return False


class SemiStreamJoin:
    """SSBJ (or plain MESHJOIN) over stream batches and a master scan; see the module doc."""

    def __init__(
        self,
        spec: JoinSpec,
        master: MasterScan,
        stream_schema: pa.Schema,
        master_schema: pa.Schema,
        cost_model: CostModel | None = None,
    ) -> None:
        self.spec = spec
        self.master = master
        self.cost_model = cost_model or CostModel()
        # given no constants, the hybrid's choice of path is priced by what it measures (ssbj.core.pathcost)
        self.path_costs: PathCosts | None = PathCosts() if cost_model is None else None
        stream_schema = plain_schema(stream_schema)
        master_schema = plain_schema(master_schema)
        if spec.stream_key not in stream_schema.names:
            raise InputError(f"stream key column {spec.stream_key!r} not in stream columns {stream_schema.names}")
        if spec.master_key not in master_schema.names:
            raise InputError(f"master key column {spec.master_key!r} not in master columns {master_schema.names}")
        proj = list(spec.master_columns) if spec.master_columns is not None else list(master_schema.names)
        missing = [c for c in proj if c not in master_schema.names]
        if missing:
            raise InputError(f"master columns {missing} not in master columns {master_schema.names}")
        key_type = stream_schema.field(spec.stream_key).type
        self._family = check_compatible(key_type, master_schema.field(spec.master_key).type)
        self._verify = needs_verification(self._family)
        # exact key types are kept once, as H_S's encoded keys; hashed ones also as the column
        self._store_key = not is_exact(self._family) or pa.types.is_dictionary(key_type)
        self.stream_schema = stream_schema
        self._proj = proj
        self._mcols = [spec.master_key] + [c for c in proj if c != spec.master_key]
        names = master_output_names(stream_schema.names, proj)
        self.output_schema = pa.schema(
            list(stream_schema) + [pa.field(n, master_schema.field(c).type) for n, c in zip(names, proj, strict=True)]
        )
        self._master_layout = pa.schema([master_schema.field(c) for c in self._mcols])
        # the master columns an output pair carries: the projection (and the key first, to
        # verify hashed keys); a take of a column the output drops is wasted
        self._pair_idx = (
            list(range(len(self._mcols))) if self._verify else [self._mcols.index(c) for c in dict.fromkeys(proj)]
        )
        self._pair_names = [self._mcols[i] for i in self._pair_idx]
        self._master_fixed = all(_fixed_width(f.type) for f in self._master_layout)
        # v_R of a fixed-width projection, as ssbj.core.rowsize measures it (0: measure rows)
        self._fixed_row_bytes = (
            sum(
                1 if pa.types.is_boolean(t) else max(1, t.bit_width // 8)
                for t in (master_schema.field(c).type for c in proj)
            )
            if self._master_fixed
            else 0
        )
        self._use_cache = spec.algorithm == "ssbj"
        # m <= 1 known from the master: every R-cycle switches (exact keys only: a hashed
        # key could collide, and two values under one code would break the single row)
        self._unique = (
            self._use_cache
            and spec.unique_key_switch
            and is_exact(self._family)
            and isinstance(master, MasterKeyUnique)
            and master.key_unique(spec.master_key)
        )
        key_width = 8 if self._store_key or key_type.bit_width < 8 else key_type.bit_width // 8
        self._key_overhead = 8 if self._store_key else ring_key_bytes(key_type, False) - key_width
        self.lookup_ok = LP.supports_lookup(master)  # (a protocol isinstance check costs ~8 us a step)
        if spec.hybrid in ("always", "index") and not self.lookup_ok:
            raise ConfigError(f"hybrid {spec.hybrid!r} needs a master that can look rows up by key (MasterLookup)")
        # overrides the hybrid step's decision when set (tests: a random decision per step)
        self.hybrid_policy: Callable[[SemiStreamJoin], bool] | None = None
        self._init_state()

    # ------------------------------------------------------------------ state
    def _init_state(self) -> None:
        self._step = 0
        self._rc = 0  # R-cycle number
        self._p = 0  # next partition to load
        self._cycle_open = False  # the R-cycle of partition self._p has begun (the scan may idle at p = 0)
        self._ix_read = 0  # index mode: stream tuples read in this R-cycle (ssbj.core.indexmode)
        self._ix_tick = 0  # index mode: refresh ticks so far (k an R-cycle; ssbj.core.indexmode)
        self._k = self.master.num_partitions()
        self._cycle_start: dict[int, int] = {}
        self.hs = StreamTable(self.stream_schema, self.spec.stream_key, self._family, self._store_key)
        self.cache = Cache(self._master_layout, self._family)
        self.cache.set_partitions(self._k)
        # MESHJOIN tracks no value: its table stays at the smallest size
        self.stats = ValueStats() if self._use_cache else ValueStats(0, cap=8)
        self.interest = Interest()  # values the disk phase looks up beyond H_S
        self.doorkeeper = Doorkeeper()  # index mode: values looked up in this R-cycle and the last
        self.rfilter = RFilter()  # values R has (tuples of other values finish at once)
        self._scan = np.zeros(3, dtype=np.int64)  # this R-cycle's scan: rows, least and largest key
        self._scan_last = np.zeros(3, dtype=np.int64)  # the same for the last complete R-cycle
        self._rf_mark = (0, 0)  # value-less tuples counted up to this R-cycle's start
        self._rf_pending = 0  # bytes kept for an R-filter deferred to the next R-cycle start (ssbj.core.switching)
        self._sb: list[tuple[pa.Table, np.ndarray, np.ndarray, int]] = []
        self._sb_seq = self._sb_bytes = 0
        # rows s_B may still take this R-cycle, values deferred for want of them; the planned
        # (rows, values) of the coming switch-in (ssbj.core.switchroom)
        self._sb_allow = np.array([SR.UNLIMITED if self.spec.memory_budget is None else 0, 0], dtype=np.int64)
        self._switch_plan = (0, 0)
        # the pipelined FSM's early switch (ssbj.core.rcycle.early_rows): [rows reserved per
        # value (0: off), early switches and early switches given up since the last count]
        self._early = np.zeros(3, dtype=np.int64)
        self._buffer: deque[Buffered] = deque()
        self._buffer_bytes = 0
        self._c = Counters()
        self._vs_avg = 0.0
        self._vr_avg = 0.0
        self._chunk_bytes, self._chunk_carry = self.spec.chunk_bytes, 0  # (carry: ssbj.core.cachephase)
        self._disk_buffer_bytes = 0
        self._disk_keys_bytes = 0  # the disk buffer's encoded keys and validity
        self._disk_buffer_peak = 0
        self._piece_bytes: dict[int, int] = {}  # nbytes of a resident partition's piece of n rows (fixed-width R)
        self._transient = 0  # bytes of the current step's temporaries
        self._transient_peak = 0
        self._transient_per_tuple = 0.0  # most temporaries per tuple in H_S (ssbj.core.budget)
        self._cache_transient = 0  # bytes of the step's cache-phase temporaries (a part of _transient)
        self._disk_transient = 0  # and of its disk-phase kernel calls' (one call's alive at a time)
        self._cache_transient_peak = 0  # most of them in one step: a per-step reserve (ssbj.core.budget)
        self._peak = 0  # most bytes held at any point of a step
        # the complete cache (ssbj.core.complete): a take-all R-cycle, then H_R holds all of R
        self._take_all = False
        self._take_all_pending = False  # the next R-cycle takes all; this one reserves its room
        self._complete = False
        self._take_all_reserve = 0  # bytes the budget keeps for the take-all's s_B and switch-in
        self._store: Any = None  # the take-all's s_B written in place (ssbj.core.takeall.RowStore)
        self._store_failed = False  # a store did not fit (R grew, a NULL): take-alls hold s_B as tables
        self._take_all_void = False  # this take-all R-cycle's s_B was dropped: nothing switches in
        self._switch_peak = 0  # bytes held at once while s_B of a take-all switched in (this step)
        # an H_R rebuild's temporaries, in a step / at an R-cycle start: this step's (the memory report
        # adds them), the most seen (reserved: ssbj.core.budget)
        self._switch_transient = self._start_transient = self._rebuild_peak = self._start_rebuild_peak = 0
        # partition -> the resident partition's buffers H_R's rows of it were last made equal to
        self._complete_seen: dict[int, tuple[Any, list[pa.Buffer]]] = {}
        self._read_memo = ReadMemo()  # partition -> buffers of its last resident read (ssbj.core.resident)
        self._plan = B.Plan()
        self._values_share = 1.0  # share of H_S's slots the value index is planned for (ssbj.core.budget)

    # ------------------------------------------------------------------ input
    def push(self, batch: pa.Table | pa.RecordBatch) -> None:
        """Append stream tuples to the stream buffer."""
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        if table.num_rows == 0:
            return
        if not table.schema.equals(self.stream_schema, check_metadata=False):
            try:
                table = table.select(self.stream_schema.names).cast(self.stream_schema)
            except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise InputError(f"stream batch does not match the stream schema: {exc}") from exc
        table = table.combine_chunks()
        keys = encode_keys(table.column(self.spec.stream_key), self._family)
        rb = row_nbytes(table)
        n = table.num_rows
        self._vs_avg = (self._vs_avg * self._c.tuples_in + float(rb.sum())) / (self._c.tuples_in + n)
        self._c.tuples_in += n
        self._buffer.append(Buffered(table, keys, rb))
        self._buffer_bytes += int(rb.sum())

    @property
    def unique_key(self) -> bool:
        """Whether values are decided in one R-cycle (``unique_key_switch`` and a master that vouches)."""
        return self._unique

    @property
    def buffered_tuples(self) -> int:
        """Stream tuples waiting in the stream buffer."""
        return sum(b.table.num_rows - b.pos for b in self._buffer)

    @property
    def hs_tuples(self) -> int:
        """Stream tuples in H_S (waiting for the rest of their R-cycle)."""
        return self.hs.live

    @property
    def waiting_tuples(self) -> int:
        """Stream tuples not yet completed."""
        return self.buffered_tuples + self.hs_tuples

    def run(self, batches: Iterable[pa.Table | pa.RecordBatch], batches_per_step: int = 1) -> Iterator[StepResult]:
        """Feed ``batches`` (a bounded input), stepping as they arrive, then drain."""
        pending = 0
        for b in batches:
            self.push(b)
            pending += 1
            if pending >= batches_per_step:
                pending = 0
                while self.buffered_tuples:
                    yield self.step()
        yield from self.drain()

    def drain(self) -> Iterator[StepResult]:
        """End of a bounded input: finish the R-cycle of every waiting tuple, then stop."""
        while self._buffer or len(self.hs.queue):
            yield self.step()

    # ------------------------------------------------------------------ costs
    def tuple_cost(self) -> float:
        """Bytes one stream tuple takes in H_S: v_S plus ring key, link and index share."""
        if not self.spec.count_overheads:
            return self._vs_avg
        return self._vs_avg + self._key_overhead + self.hs.link_bytes + StreamTable.index_bytes_per_value()

    def row_cost(self) -> float:
        """Bytes one master row takes in H_R: v_R plus its partition tag."""
        return self._vr_avg + 4 if self.spec.count_overheads else self._vr_avg

    def entry_cost(self) -> float:
        """Bytes of the H_R index entry of a cached value with rows."""
        return self.cache.entry_cost() if self.spec.count_overheads else 0.0

    def empty_cost(self) -> float:
        """Bytes of an empty cache entry."""
        return self.cache.empty_cost() if self.spec.count_overheads else 0.0

    # ------------------------------------------------------------------ step
    def step(self) -> StepResult:
        """One outer-loop iteration of Algorithm 1."""
        t0 = time.perf_counter()
        pairs: list[tuple[pa.Table, pa.Table]] = []
        unmatched: list[pa.Table] = []
        self._transient = self._cache_transient = self._disk_transient = 0
        self._switch_transient = self._switch_peak = self._start_transient = 0
        if self._p == 0 and not self._cycle_open:
            self._begin_r_cycle(pairs, unmatched)
            self._cycle_open = True
        fsm = self.fsm_code
        t1 = time.perf_counter()
        w_n, w_s, w_null = (CPC.complete_phase if self._complete else CP.cache_phase)(self, pairs, unmatched)
        t2 = time.perf_counter()
        p = self._p
        if IX.on(self):  # no scan: the misses looked up, cached, the slice of p refreshed (ssbj.core.indexmode)
            done = IX.lookup(self, p, pairs, unmatched)
            t3 = time.perf_counter()
            IX.after_lookup(self, p, done, w_n + w_s + w_null)
            b_rows, path = 0, "idle" if done is None else "lookup"
        else:
            done = LP.lookup_phase(self, p, pairs, unmatched) if LP.choose_lookup(self) else None
            t3 = time.perf_counter()
            b_rows, waited, path = self._scan_or_idle(p, fsm, done is not None, pairs, unmatched)
            t3 += waited
            if self.path_costs is not None:
                if done is not None:
                    self.path_costs.note_lookup(done.keys, done.seconds)
                if b_rows:
                    self.path_costs.note_read(b_rows, read_seconds(self.master, waited))
        if self.hs.live >= B.MIN_MEASURED:
            # the cache phase's temporaries scale with the tuples a step reads, not with H_S
            per = (self._transient - self._cache_transient) / self.hs.live
            self._transient_per_tuple = max(self._transient_per_tuple, per)
        enriched = self._assemble(pairs)
        um = pa.concat_tables(unmatched) if unmatched else self.stream_schema.empty_table()
        self._c.unmatched += um.num_rows
        self._c.output_rows += enriched.num_rows
        self._c.steps += 1
        self._step += 1
        if self.cache.last_transient:  # an H_R rebuild's temporaries (switch-in, eviction, refresh)
            self._switch_transient = max(self._switch_transient, self.cache.last_transient)
            self._rebuild_peak = max(self._rebuild_peak, self.cache.last_transient)
            self.cache.last_transient = 0
        if self._switch_peak:  # the step reports at least what the switch-in held at once
            mem = self.memory()
            self._switch_transient = max(self._switch_transient, self._switch_peak - (mem.total - mem.transient))
        t4 = time.perf_counter()
        metrics = RP.step_metrics(
            self, p, fsm, w_n, w_s, w_null, b_rows, enriched.num_rows, t4 - t0, t3 - t2, t2 - t1, t4 - t3
        )
        if self._c.served_lookup or path != "scan":
            metrics = LP.with_lookup(metrics, path, done, self._c.served_lookup)
        self._c.busy_seconds += time.perf_counter() - t0
        return StepResult(enriched, um, metrics)

    def _scan_or_idle(
        self, p: int, fsm: int, looked_up: bool, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]
    ) -> tuple[int, float, str]:
        """Run the disk phase and expiry of partition ``p`` unless the scan may idle: (rows, seconds waited, path)."""
        if LP.can_idle(self):
            return 0, 0.0, "lookup" if looked_up else "idle"
        b_rows, waited = DP.scan_partition(self, p, fsm, pairs)
        if self.spec.memory_budget is not None and self._rc == 1 and p == 0:
            B.adapt(self)  # the first partition is measured now: size the chunks of cycle 1
        EX.expire(self, p, unmatched)
        self._p = (p + 1) % self._k
        self._cycle_open = self._p != 0
        return b_rows, waited, "lookup+scan" if looked_up else "scan"

    @property
    def chunk_bytes(self) -> int:
        """Bytes of stream tuples that may enter H_S per step (w_S in bytes, adapted under a budget)."""
        return self._chunk_bytes

    @property
    def fsm_code(self) -> int:
        """1 incrementing, 2 switching, 0 phase-out, 3 take-all, 4 complete; -1 MESHJOIN or before R-cycle 1.

        With the per-value FSM (``JoinSpec.switching``, or a unique master key) every R-cycle is a switching one.
        """
        if not self._use_cache or self._rc == 0:
            return -1
        if self._complete:
            return CC.COMPLETE
        if self._take_all:
            return CC.TAKE_ALL
        return SWITCHING if self._per_value_fsm() else self._rc % 3

    def _per_value_fsm(self) -> bool:
        """Whether every R-cycle counts, decides and phases out (unique key or pipelined FSM)."""
        return self._unique or self.spec.switching == "pipelined"

    def _phase_out_now(self) -> bool:
        """Whether this R-cycle start is a phase-out (s_B moves into H_R)."""
        return self._rc >= 2 if self._per_value_fsm() else self._rc % 3 == 0

    @property
    def complete(self) -> bool:
        """Whether H_R holds all of R (:mod:`ssbj.core.complete`): a miss has no master row."""
        return self._complete

    @property
    def r_cycle(self) -> int:
        """Number of the current R-cycle (rc)."""
        return self._rc

    def _begin_r_cycle(self, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]) -> None:
        """Lines 3-14 of Algorithm 1 (:func:`ssbj.core.rcycle.begin_r_cycle`)."""
        RC.begin_r_cycle(self, pairs, unmatched)

    def rebuild_interest(self) -> None:
        """Refill the disk phase's filter (:func:`ssbj.core.rcycle.rebuild_interest`)."""
        RC.rebuild_interest(self)

    # ------------------------------------------------------------------ output
    def _verified(self, s: pa.Table, m: pa.Table) -> np.ndarray | None:
        """Mask of pairs whose real key values agree, or None when all do (hashed keys only)."""
        if not self._verify or s.num_rows == 0:
            return None
        ok = np.asarray(
            pc.equal(s.column(self.spec.stream_key), m.column(0)).to_numpy(zero_copy_only=False), dtype=bool
        )
        return None if ok.all() else ok

    def _assemble(self, pairs: list[tuple[pa.Table, pa.Table]]) -> pa.Table:
        if not pairs:
            return self.output_schema.empty_table()
        s_all = pa.concat_tables([s for s, _ in pairs]) if len(pairs) > 1 else pairs[0][0]
        # pairs of the cache and disk phases carry the pair layout, others all master columns
        names = self._pair_names
        ms = [m if m.column_names == names else m.select(names) for _, m in pairs]
        m_all = pa.concat_tables(ms) if len(ms) > 1 else ms[0]
        arrays = list(s_all.columns) + [m_all.column(c) for c in self._proj]
        return pa.Table.from_arrays(arrays, schema=self.output_schema)

    def _note_transient(self, nbytes: int) -> None:
        self._transient += int(nbytes)
        self._transient_peak = max(self._transient_peak, self._transient)

    def _note_cache_transient(self, nbytes: int) -> None:
        """Count a cache-phase call's arrays: one call's are alive at a time (see ``budget.cache_call_tuples``)."""
        more = max(0, int(nbytes) - self._cache_transient)
        self._cache_transient += more
        self._note_transient(more)
        self._cache_transient_peak = max(self._cache_transient_peak, self._cache_transient)

    def _note_disk_transient(self, nbytes: int) -> None:
        """Count a disk-phase kernel call's arrays and the slots kept beside them (their most, not their sum)."""
        more = max(0, int(nbytes) - self._disk_transient)
        self._disk_transient += more
        self._note_transient(more)

    # ------------------------------------------------------------------ introspection
    def cached_values(self) -> np.ndarray:
        """Return the encoded join values served by H_R (the values themselves for integer keys)."""
        return np.sort(self.cache.values_cached())

    def hs_count(self, value: int) -> int:
        """Stream tuples of an (encoded) join value in H_S."""
        return self.hs.chain_length(value)

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(self, store: DirectoryStore, checkpoint_id: int, meta: dict[str, Any] | None = None) -> None:
        """Save the full state as checkpoint ``checkpoint_id``, writing only what is new.

        ``meta`` (JSON-serialisable) is stored in the same manifest, so the caller's own
        state (scan layout, batch ids, counters) commits atomically with the operator's.
        """
        persist.save(self, store, checkpoint_id, meta)

    @staticmethod
    def checkpoint_meta(store: DirectoryStore, checkpoint_id: int | None = None) -> dict[str, Any]:
        """Return the ``meta`` saved with checkpoint ``checkpoint_id`` (default: the newest)."""
        _, m = store.read_manifest(checkpoint_id)
        meta: dict[str, Any] = m.get("meta", {})
        return meta

    @classmethod
    def restore(
        cls,
        store: DirectoryStore,
        spec: JoinSpec,
        master: MasterScan,
        stream_schema: pa.Schema,
        master_schema: pa.Schema,
        checkpoint_id: int | None = None,
        cost_model: CostModel | None = None,
    ) -> SemiStreamJoin:
        """Return an operator in exactly the state saved by :meth:`checkpoint`."""
        op = cls(spec, master, stream_schema, master_schema, cost_model)
        persist.load(op, store, checkpoint_id)
        return op

    # ------------------------------------------------------------------ reporting
    def memory(self) -> MemoryReport:
        """Bytes per component (the stream buffer is reported but not part of the budget)."""
        return RP.memory_report(self)

    def totals(self) -> OperatorTotals:
        """Run-level counters; ``tuples_in == matched + unmatched + waiting`` always holds."""
        return RP.operator_totals(self)
