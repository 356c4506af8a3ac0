"""The semi-stream join operator: MESHJOIN disk phase with the SSBJ cache phase in front.

One call to :meth:`SemiStreamJoin.step` is one iteration of the outer loop of Algorithm 1
of the SSBJ paper: housekeeping at a new R-cycle, the cache phase over up to ``w`` stream
tuples, the disk phase over one partition of R, expiry of the oldest chunk.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.core import kernels as K
from ssbj.core.arrowtypes import plain_schema, plain_table
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.costmodel import CostModel, StepCost
from ssbj.core.hsrows import HSRows
from ssbj.core.keys import EncodedKeys, check_compatible, encode_keys, needs_verification
from ssbj.core.keytable import KeyTable
from ssbj.core.master import MasterScan
from ssbj.core.metrics import MemoryReport, StepMetrics
from ssbj.core.rowsize import row_nbytes
from ssbj.errors import CheckpointError, ConfigError, InputError

Algorithm = Literal["ssbj", "meshjoin"]
FSM_NAMES = {1: "incrementing", 2: "switching", 0: "phase-out"}
_SLOT_BYTES = 8 + 8 + 8 + 1  # ring_key, ring_next, ring_bytes, ring_matched
_CHUNK_BYTES = 64  # one queue element


def _pow2(n: int) -> int:
    """Smallest power of two >= max(n, 64)."""
    p = 64
    while p < n:
        p *= 2
    return p


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
    bytes); ``memory_budget`` (bytes), when set, re-derives it at every phase-out R-cycle
    from the memory left after H_R, the disk buffer and the switching buffer, as the
    paper's "Adapt MESHJOIN setting w".
    """

    stream_key: str
    master_key: str
    master_columns: tuple[str, ...] | None = None
    algorithm: Algorithm = "ssbj"
    switch_factor: float = 1.0
    eviction_interval: int = 10
    chunk_bytes: int = 1 << 20
    max_step_tuples: int = 1 << 20
    memory_budget: int | None = None
    min_chunk_bytes: int = 1

    def __post_init__(self) -> None:
        if self.algorithm not in ("ssbj", "meshjoin"):
            raise ConfigError(f"algorithm must be 'ssbj' or 'meshjoin', got {self.algorithm!r}")
        if self.switch_factor <= 0:
            raise ConfigError(f"switch_factor (s_f) must be > 0, got {self.switch_factor}")
        if self.eviction_interval < 1:
            raise ConfigError(f"eviction_interval must be >= 1, got {self.eviction_interval}")
        if self.chunk_bytes < 1 or self.max_step_tuples < 1:
            raise ConfigError("chunk_bytes and max_step_tuples must be >= 1")
        if self.memory_budget is not None and self.memory_budget < 1:
            raise ConfigError(f"memory_budget must be >= 1 byte, got {self.memory_budget}")


@dataclass
class StepResult:
    """Output of one step: enriched rows and stream rows that finished without a match."""

    enriched: pa.Table
    unmatched: pa.Table
    metrics: StepMetrics


@dataclass
class _Chunk:
    base: int  # first slot
    n: int
    p0: int  # partition loaded in the step the chunk entered
    nbytes: int  # row bytes of its stream tuples (the rows themselves live in HSRows)


@dataclass
class _Buffered:
    table: pa.Table
    keys: EncodedKeys
    row_bytes: np.ndarray
    pos: int = 0


@dataclass
class _Counters:
    tuples_in: int = 0
    served_cache: int = 0  # tuples completed by the cache phase (matched or empty entry)
    served_disk: int = 0  # tuples completed by the disk phase (expired or removed from H_S)
    null_keys: int = 0
    matched: int = 0  # source tuples with at least one output row
    unmatched: int = 0
    output_rows: int = 0
    steps: int = 0
    switched_in: int = 0
    evicted: int = 0
    busy_seconds: float = 0.0
    extra: dict[str, int] = field(default_factory=dict)


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
        self._family = check_compatible(
            stream_schema.field(spec.stream_key).type, master_schema.field(spec.master_key).type
        )
        self._verify = needs_verification(self._family)
        self.stream_schema = stream_schema
        self._proj = proj
        # disk buffer / H_R layout: the master key first, then the projected columns
        self._mcols = [spec.master_key] + [c for c in proj if c != spec.master_key]
        names = master_output_names(stream_schema.names, proj)
        self.output_schema = pa.schema(
            list(stream_schema) + [pa.field(n, master_schema.field(c).type) for n, c in zip(names, proj, strict=True)]
        )
        self._master_layout = pa.schema([master_schema.field(c) for c in self._mcols])
        self._use_cache = spec.algorithm == "ssbj"
        self._chunk_bytes = spec.chunk_bytes
        self._init_state()

    # ------------------------------------------------------------------ state
    def _init_state(self) -> None:
        self._step = 0
        self._rc = 0  # R-cycle number
        self._p = 0  # next partition to load
        self._k = self.master.num_partitions()
        self._cycle_start: dict[int, int] = {}
        self._kt = KeyTable()
        rcap = 1024
        self._ring_key = np.zeros(rcap, dtype=np.int64)
        self._ring_next = np.zeros(rcap, dtype=np.int64)
        self._ring_bytes = np.zeros(rcap, dtype=np.int64)
        self._ring_matched = np.zeros(rcap, dtype=np.uint8)
        self._live_lo = 0
        self._next_slot = 0
        self._queue: deque[_Chunk] = deque()
        self._hs_rows = HSRows(self.stream_schema)
        self._hr_table = self._master_layout.empty_table()
        self._hr_keys = np.zeros(0, dtype=np.int64)
        self._hr_part = np.zeros(0, dtype=np.int64)  # s_B partition tag (switch-in), k for older rows
        self._hr_src = np.zeros(0, dtype=np.int64)  # partition each cached row was last read from
        self._sb: list[tuple[pa.Table, np.ndarray, np.ndarray, int]] = []
        self._sb_seq = 0
        self._hr_version = 0
        self._buffer: deque[_Buffered] = deque()
        self._disk_buffer_bytes = 0
        self._c = _Counters()
        self._vs_avg = 0.0
        self._vr_avg = 0.0
        self._hs_live = 0  # stream tuples in H_S
        self._hs_chunk_bytes = 0  # bytes of the chunks in Q
        self._sb_bytes = 0
        self._sb_peak = 0
        self._disk_buffer_peak = 0
        self._hr_bytes = 0
        self._buffer_bytes = 0  # row bytes not yet read by the cache phase
        self._cached_entries = 0  # join values served by H_R

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
        self._buffer.append(_Buffered(table, keys, rb))
        self._buffer_bytes += int(rb.sum())

    @property
    def buffered_tuples(self) -> int:
        """Stream tuples waiting in the stream buffer."""
        return sum(b.table.num_rows - b.pos for b in self._buffer)

    @property
    def hs_tuples(self) -> int:
        """Stream tuples in H_S (waiting for the rest of their R-cycle)."""
        return self._hs_live

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
        while self._buffer or self._queue:
            yield self.step()

    # ------------------------------------------------------------------ step
    def step(self) -> StepResult:
        """One outer-loop iteration of Algorithm 1."""
        t0 = time.perf_counter()
        pairs: list[tuple[pa.Table, pa.Table]] = []
        unmatched: list[pa.Table] = []
        new_cycle = self._p == 0
        if new_cycle:
            self._begin_r_cycle(pairs, unmatched)
        fsm = self.fsm_code
        t1 = time.perf_counter()
        w_n, w_s, w_null = self._cache_phase(pairs, unmatched)
        t2 = time.perf_counter()
        p = self._p
        part = plain_table(self.master.read_partition(p).select(self._mcols))
        t3 = time.perf_counter()
        mk = self._disk_phase(part, fsm, pairs)
        if self._use_cache and len(self._hr_src) + self._cached_entries > 0:
            self._refresh_hr(p, part, mk)
        if new_cycle and self.spec.memory_budget is not None and self._step == self._cycle_start.get(1):
            self._adapt_w()  # the first partition is measured now: size the chunks of cycle 1
        self._expire(p, unmatched)
        if self._use_cache and fsm == 2 and p == self._k - 1:
            K.mark_empty_switches(
                self._kt.rstate, self._kt.kv, self._rc, self._cycle_start[self._rc], self.spec.switch_factor
            )
        self._p = (p + 1) % self._k
        enriched = self._assemble(pairs)
        um = pa.concat_tables(unmatched) if unmatched else self.stream_schema.empty_table()
        self._c.unmatched += um.num_rows
        self._c.output_rows += enriched.num_rows
        self._c.steps += 1
        self._step += 1
        t4 = time.perf_counter()
        metrics = self._metrics(
            p, fsm, w_n, w_s, w_null, part.num_rows, enriched.num_rows, t4 - t0, t3 - t2, t2 - t1, t4 - t3
        )
        self._c.busy_seconds += time.perf_counter() - t0
        return StepResult(enriched, um, metrics)

    @property
    def chunk_bytes(self) -> int:
        """Bytes of stream tuples that may enter H_S per step (w_S in bytes, adapted under a budget)."""
        return self._chunk_bytes

    @property
    def fsm_code(self) -> int:
        """1 incrementing, 2 switching, 0 phase-out; -1 for MESHJOIN or before the first R-cycle."""
        if not self._use_cache or self._rc == 0:
            return -1
        return self._rc % 3

    @property
    def r_cycle(self) -> int:
        """Number of the current R-cycle (rc)."""
        return self._rc

    def _begin_r_cycle(self, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]) -> None:
        self._rc += 1
        self._k = self.master.num_partitions()
        self._cycle_start[self._rc] = self._step
        for old in [c for c in self._cycle_start if c < self._rc - 2]:
            del self._cycle_start[old]
        if self._rc > 1:
            kt = self._kt
            # with k = 1 every value leaves H_S within its step: keep values seen in the previous
            # R-cycle so their counts survive until the switching decision
            idle_before = self._cycle_start[self._rc - 1] if self._k == 1 else self._step
            kt.released(int(K.collect_garbage(kt.tkeys, kt.trec, kt.kv, kt.rstate, kt.free, kt.meta, idle_before)))
        if self._use_cache:
            evicted = 0
            if self._rc % self.spec.eviction_interval == 0:
                evicted = int(K.evict(self._kt.rstate, self._kt.kv, self._rc, self._step, self.spec.switch_factor))
                self._c.evicted += evicted
                self._cached_entries -= evicted
            if self._rc % 3 == 0:  # phase-out: MOVE all tuples from s_B to H_R
                n_switch = self._switching_entries()
                if n_switch or evicted:
                    self._rebuild_hr()
                if n_switch:
                    self._switch_in(pairs, unmatched)
                    self._c.switched_in += n_switch
                    self._cached_entries += n_switch
                K.reset_s_count(self._kt.rstate, self._kt.kv)
            elif evicted:
                self._rebuild_hr()
        self._adapt_w()

    def _adapt_w(self) -> None:
        """Adapt MESHJOIN setting w: the H_S chunk gets what the budget leaves over.

        The memory left after the disk buffer, H_R and s_B is shared by k chunks of stream
        tuples, the slot ring and the key table, whose power-of-two capacities are sized
        here for the whole R-cycle, so the budget holds physically, not just for the rows.
        """
        budget = self.spec.memory_budget
        if budget is None:
            return
        if self._disk_buffer_bytes == 0:
            self._reserve(self._chunk_bytes, self._cached_entries + self._switching_entries())
            return  # first R-cycle: keep the planned chunk size until a partition is measured
        mem = self.memory()
        # s_B fills during a switching R-cycle: keep room for the largest one seen so far
        sb = max(mem.switching_buffer, self._sb_peak)
        # the disk buffer is as large as the largest partition (the last one may be short)
        disk = max(mem.disk_buffer, self._disk_buffer_peak)
        avail = budget - (disk + mem.h_r + sb + self._k * _CHUNK_BYTES)
        lo, hi = self.spec.min_chunk_bytes, max(self.spec.min_chunk_bytes, avail // max(self._k, 1))
        pinned = self._cached_entries + self._switching_entries()
        while lo < hi:  # largest chunk whose H_S, ring and key table fit in what is left
            mid = (lo + hi + 1) // 2
            if self._hs_need(mid, pinned) <= avail:
                lo = mid
            else:
                hi = mid - 1
        self._chunk_bytes = lo
        self._reserve(lo, pinned)

    def _hs_tuples_for(self, chunk_bytes: int) -> int:
        return self._k * (int(chunk_bytes / max(self._vs_avg, 1.0)) + 1)

    def _capacities(self, chunk_bytes: int, pinned: int) -> tuple[int, int]:
        """Ring slots and key-table entries one R-cycle of chunks of ``chunk_bytes`` needs."""
        tuples = self._hs_tuples_for(chunk_bytes)
        chunk = tuples // max(self._k, 1)
        # a value keeps its record until the R-cycle after its last tuple left H_S (see
        # _begin_r_cycle): up to two R-cycles of values
        entries = pinned + 2 * tuples  # pinned: cached and switching values
        return _pow2(tuples + chunk), entries

    def _hs_need(self, chunk_bytes: int, pinned: int) -> int:
        ring, entries = self._capacities(chunk_bytes, pinned)
        return self._k * chunk_bytes + ring * _SLOT_BYTES + KeyTable.bytes_for(entries)

    def _reserve(self, chunk_bytes: int, pinned: int) -> None:
        """Bound the ring and the key table by what the coming R-cycle can need."""
        ring, entries = self._capacities(chunk_bytes, pinned)
        # shrink what the coming R-cycle cannot need; growth stays on demand (and cannot
        # pass these sizes), so a small input does not allocate the whole budget up front
        ring = max(ring, _pow2(self._next_slot - self._live_lo))
        if len(self._ring_key) > ring:
            self._resize_ring(ring)
        self._kt.shrink(entries)

    def _switching_entries(self) -> int:
        if not self._use_cache:
            return 0
        return int(np.count_nonzero(self._kt.live() & (self._kt.kv[:, K.SWITCHING] == 1)))

    # ------------------------------------------------------------------ phases
    def _cache_phase(self, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]) -> tuple[int, int, int]:
        """READ w stream tuples; hits are answered from H_R, misses form the new H_S chunk."""
        budget = self._chunk_bytes
        used = 0
        remaining = self.spec.max_step_tuples
        miss_tables: list[pa.Table] = []
        miss_keys: list[np.ndarray] = []
        miss_bytes: list[np.ndarray] = []
        w_n = w_s = w_null = 0
        while self._buffer and remaining > 0 and used < budget:
            buf = self._buffer[0]
            start = buf.pos
            consumed, hit_entry, miss_idx, null_idx, used = K.cache_probe(
                self._kt.tkeys,
                self._kt.trec,
                self._kt.kv,
                buf.keys.values,
                buf.keys.valid,
                buf.row_bytes,
                start,
                budget,
                used,
                remaining,
                self._use_cache and self._cached_entries > 0,  # an empty H_R answers nothing
            )
            consumed = int(consumed)
            self._buffer_bytes -= int(buf.row_bytes[start : start + consumed].sum())
            remaining -= consumed
            buf.pos += consumed
            if len(null_idx):
                unmatched.append(buf.table.take(null_idx))
                w_null += len(null_idx)
            n_hits = consumed - len(miss_idx) - len(null_idx)
            if n_hits:
                ps, pr = K.expand_cache_hits(hit_entry, self._kt.kv, start)
                ps, pr = self._emit(pairs, buf.table, ps, pr)
                matched_mask = np.zeros(consumed, dtype=bool)
                matched_mask[ps - start] = True
                hit_mask = hit_entry >= 0
                n_matched = int(np.count_nonzero(matched_mask & hit_mask))
                self._c.matched += n_matched
                no_match = np.flatnonzero(hit_mask & ~matched_mask) + start
                if len(no_match):
                    unmatched.append(buf.table.take(no_match))
                w_n += n_hits
            if len(miss_idx):
                miss_tables.append(buf.table.take(miss_idx))
                miss_keys.append(buf.keys.values[miss_idx])
                miss_bytes.append(buf.row_bytes[miss_idx])
                w_s += len(miss_idx)
            if buf.pos >= buf.table.num_rows:
                self._buffer.popleft()
            else:
                break  # stopped inside the batch: the chunk is full or max_step_tuples reached
        self._c.served_cache += w_n
        self._c.null_keys += w_null
        if miss_tables:
            self._hs_add(
                pa.concat_tables(miss_tables) if len(miss_tables) > 1 else miss_tables[0],
                np.concatenate(miss_keys),
                np.concatenate(miss_bytes),
            )
        return w_n, w_s, w_null

    def _hs_add(self, table: pa.Table, keys: np.ndarray, rb: np.ndarray) -> None:
        """ADD the chunk into H_S and its slots into the queue Q."""
        n = table.num_rows
        self._ensure_ring(self._next_slot + n - self._live_lo)
        self._kt.ensure(n)
        kt = self._kt
        K.hs_insert(
            kt.tkeys,
            kt.trec,
            kt.kv,
            kt.rstate,
            kt.free,
            kt.meta,
            self._ring_key,
            self._ring_next,
            self._ring_bytes,
            self._ring_matched,
            keys,
            rb,
            self._next_slot,
            self._step,
        )
        self._hs_live += n
        self._hs_rows.append(self._next_slot, table)
        self._queue.append(_Chunk(self._next_slot, n, self._p, int(rb.sum())))
        self._hs_chunk_bytes += self._queue[-1].nbytes
        self._next_slot += n

    def _disk_phase(self, part: pa.Table, fsm: int, pairs: list[tuple[pa.Table, pa.Table]]) -> EncodedKeys:
        """Probe H_S with every tuple of the disk buffer (with the cache-migration instrumentation)."""
        self._disk_buffer_bytes = part.nbytes
        self._disk_buffer_peak = max(self._disk_buffer_peak, self._disk_buffer_bytes)
        mk = encode_keys(part.column(0), self._family)
        if part.num_rows == 0:
            return mk
        count_bytes = fsm in (1, 2)
        mb = row_nbytes(part.select(self._proj)) if count_bytes else np.zeros(part.num_rows, dtype=np.int64)
        if count_bytes and part.num_rows:
            seen = self._c.extra.get("master_rows_measured", 0)
            self._vr_avg = (self._vr_avg * seen + float(mb.sum())) / (seen + part.num_rows)
            self._c.extra["master_rows_measured"] = seen + part.num_rows
        eligible = self._cycle_start.get(self._rc - 1, -1) if fsm == 2 else -1
        if not self._queue and fsm not in (1, 2):
            return mk
        pm, psl, sb = K.disk_probe(
            self._kt.tkeys,
            self._kt.trec,
            self._kt.kv,
            self._ring_next,
            self._ring_matched,
            self._live_lo,
            mk.values,
            mk.valid,
            mb,
            fsm if self._use_cache else -1,
            self._rc,
            eligible,
            self.spec.switch_factor,
            not self._verify,
        )
        if len(sb):
            self._sb_seq += 1
            self._sb_bytes += int(part.nbytes * len(sb) / max(part.num_rows, 1)) + 16 * len(sb)
            self._sb_peak = max(self._sb_peak, self._sb_bytes)
            self._sb.append((part.take(sb), mk.values[sb], np.full(len(sb), self._p, dtype=np.int64), self._sb_seq))
        if len(pm):
            self._emit_slots(pairs, psl, part, pm)
        return mk

    def _expire(self, p: int, unmatched: list[pa.Table]) -> None:
        """DELETE the oldest chunk from Q and H_S once it has met every partition of R."""
        while self._queue and self._queue[0].p0 == (p + 1) % self._k:
            ch = self._queue.popleft()
            self._hs_chunk_bytes -= ch.nbytes
            um, live = K.expire_slots(
                self._kt.tkeys,
                self._kt.trec,
                self._kt.kv,
                self._ring_key,
                self._ring_bytes,
                self._ring_matched,
                ch.base,
                ch.base + ch.n,
            )
            live = int(live)
            self._hs_live -= live
            self._c.served_disk += live
            self._c.matched += live - len(um)
            if len(um):
                unmatched.append(self._hs_rows.take(um))
            self._live_lo = self._queue[0].base if self._queue else self._next_slot
            self._hs_rows.drop_before(self._live_lo)

    def _switch_in(self, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]) -> None:
        bases = np.array([c.base for c in self._queue], dtype=np.int64)
        p0s = np.array([c.p0 for c in self._queue], dtype=np.int64)
        ps, pr, removed = K.switch_in(
            self._kt.rstate,
            self._kt.kv,
            self._ring_next,
            self._ring_matched,
            self._live_lo,
            self._next_slot,
            bases,
            p0s,
            self._hr_part,
            self._rc,
            not self._verify,
        )
        mask = len(self._ring_matched) - 1
        if len(ps):
            self._emit_slots(pairs, ps, self._hr_table, pr)
        self._c.served_disk += len(removed)
        self._hs_live -= len(removed)
        done_unmatched = removed[self._ring_matched[removed & mask] == 0]
        self._c.matched += len(removed) - len(done_unmatched)
        if len(done_unmatched):
            unmatched.append(self._hs_rows.take(done_unmatched))

    def _rebuild_hr(self) -> None:
        """Rebuild H_R from the rows of values still cached plus s_B, grouped by join value."""
        tables = [self._hr_table]
        keys = [self._hr_keys]
        parts = [np.full(len(self._hr_keys), self._k, dtype=np.int64)]
        srcs = [self._hr_src]
        for t, k, p, _ in self._sb:
            tables.append(t)
            keys.append(k)
            parts.append(p)
            srcs.append(p)
        self._sb = []
        self._sb_bytes = 0
        self._set_hr(tables, keys, parts, srcs)

    def _refresh_hr(self, p: int, part: pa.Table, mk: EncodedKeys) -> None:
        """Replace the cached rows last read from partition ``p`` by the rows read now.

        The disk phase reads every master row once per R-cycle, so no cached row is
        older than one R-cycle: updates, inserts and deletes of cached values show.
        """
        kv = self._kt.kv
        ent = self._kt.lookup(mk.values)
        sel = (ent >= 0) & mk.valid
        sel[sel] = kv[ent[sel], K.CACHED] == 1
        new_idx = np.flatnonzero(sel)
        old_idx = np.flatnonzero(self._hr_src == p)
        if len(new_idx) == 0 and len(old_idx) == 0:
            return
        # H_R is sorted by value and keeps the read order within a value and partition
        new_idx = new_idx[np.argsort(mk.values[new_idx], kind="stable")]
        fresh = part.take(new_idx)
        if len(new_idx) == len(old_idx) and fresh.equals(self._hr_table.take(old_idx)):
            return
        keep = np.flatnonzero(self._hr_src != p)
        self._c.extra["cache_refreshes"] = self._c.extra.get("cache_refreshes", 0) + 1
        self._set_hr(
            [self._hr_table.take(keep), fresh],
            [self._hr_keys[keep], mk.values[new_idx]],
            [self._hr_part[keep], np.full(len(new_idx), self._k, dtype=np.int64)],
            [self._hr_src[keep], np.full(len(new_idx), p, dtype=np.int64)],
        )

    def _set_hr(
        self, tables: list[pa.Table], keys: list[np.ndarray], parts: list[np.ndarray], srcs: list[np.ndarray]
    ) -> None:
        """Make H_R the rows of cached (or switching) values among ``tables``, as CSR per value."""
        self._hr_version += 1
        allk = np.concatenate(keys)
        allp = np.concatenate(parts)
        alls = np.concatenate(srcs)
        kv = self._kt.kv
        ent = self._kt.lookup(allk)
        keep_ent = ent >= 0
        keep = np.zeros(len(allk), dtype=bool)
        keep[keep_ent] = (kv[ent[keep_ent], K.CACHED] == 1) | (kv[ent[keep_ent], K.SWITCHING] == 1)
        idx = np.flatnonzero(keep)
        order = idx[np.argsort(allk[idx], kind="stable")]
        table = pa.concat_tables(tables).combine_chunks() if len(tables) > 1 else tables[0]
        self._hr_table = table.take(order)
        self._hr_keys = allk[order]
        self._hr_part = allp[order]
        self._hr_src = alls[order]
        self._hr_bytes = int(self._hr_table.nbytes + self._hr_keys.nbytes + self._hr_part.nbytes + self._hr_src.nbytes)
        # CSR per cached value
        live = self._kt.live() & ((kv[:, K.CACHED] == 1) | (kv[:, K.SWITCHING] == 1))
        kv[live, K.HR_LEN] = 0
        kv[live, K.HR_BYTES] = 0
        if len(order):
            uniq, starts, counts = np.unique(self._hr_keys, return_index=True, return_counts=True)
            e = self._kt.lookup(uniq)
            rb = row_nbytes(self._hr_table.select(self._proj))
            csum = np.concatenate([[0], np.cumsum(rb)])
            kv[e, K.HR_START] = starts
            kv[e, K.HR_LEN] = counts
            kv[e, K.HR_BYTES] = csum[starts + counts] - csum[starts]

    # ------------------------------------------------------------------ output
    def _verified_mask(self, s: pa.Table, m: pa.Table) -> np.ndarray | None:
        """Mask of pairs whose real key values agree, or None when all do (hashed keys only)."""
        if not self._verify or s.num_rows == 0:
            return None
        ok = np.asarray(
            pc.equal(s.column(self.spec.stream_key), m.column(0)).to_numpy(zero_copy_only=False), dtype=bool
        )
        return None if ok.all() else ok

    def _emit(
        self, pairs: list[tuple[pa.Table, pa.Table]], stream: pa.Table, ps: np.ndarray, pr: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Output pairs (stream row ps[i], H_R row pr[i]); returns the verified pairs."""
        s = stream.take(ps)
        m = self._hr_table.take(pr)
        ok = self._verified_mask(s, m)
        if ok is not None:
            s, m, ps, pr = s.filter(ok), m.filter(ok), ps[ok], pr[ok]
        if len(ps):
            pairs.append((s, m))
        return ps, pr

    def _emit_slots(
        self, pairs: list[tuple[pa.Table, pa.Table]], slots: np.ndarray, master: pa.Table, mrows: np.ndarray
    ) -> None:
        """Output pairs (H_S slot, master row); with hashed keys, verify and mark matches here."""
        s = self._hs_rows.take(slots)
        m = master.take(mrows)
        if self._verify:
            ok = self._verified_mask(s, m)
            if ok is not None:
                s, m, slots = s.filter(ok), m.filter(ok), slots[ok]
            self._ring_matched[slots & (len(self._ring_matched) - 1)] = 1
        if len(slots):
            pairs.append((s, m))

    def _assemble(self, pairs: list[tuple[pa.Table, pa.Table]]) -> pa.Table:
        if not pairs:
            return self.output_schema.empty_table()
        arrays: list[pa.ChunkedArray] = []
        s_all = pa.concat_tables([s for s, _ in pairs]) if len(pairs) > 1 else pairs[0][0]
        m_all = pa.concat_tables([m for _, m in pairs]) if len(pairs) > 1 else pairs[0][1]
        arrays.extend(s_all.columns)
        for c in self._proj:
            arrays.append(m_all.column(c))
        return pa.Table.from_arrays(arrays, schema=self.output_schema)

    # ------------------------------------------------------------------ capacity
    def _ensure_ring(self, need: int) -> None:
        if need > len(self._ring_key):
            self._resize_ring(_pow2(need))

    def _resize_ring(self, new_cap: int) -> None:
        cap = len(self._ring_key)
        if new_cap == cap:
            return
        old_mask, new_mask = cap - 1, new_cap - 1
        live = np.arange(self._live_lo, self._next_slot, dtype=np.int64)
        arrays = []
        for arr in (self._ring_key, self._ring_next, self._ring_bytes, self._ring_matched):
            new = np.zeros(new_cap, dtype=arr.dtype)
            new[live & new_mask] = arr[live & old_mask]
            arrays.append(new)
        self._ring_key, self._ring_next, self._ring_bytes, self._ring_matched = arrays

    # ------------------------------------------------------------------ introspection
    def cached_values(self) -> np.ndarray:
        """Return the encoded join values served by H_R (the values themselves for integer keys)."""
        kv = self._kt.kv
        return np.sort(kv[self._kt.live() & (kv[:, K.CACHED] == 1), K.KEY])

    def hs_count(self, value: int) -> int:
        """Stream tuples of an (encoded) join value in H_S."""
        e = self._kt.lookup(np.array([value], dtype=np.int64))[0]
        return int(self._kt.kv[e, K.HS_COUNT]) if e >= 0 else 0

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(self, store: DirectoryStore, checkpoint_id: int, meta: dict[str, Any] | None = None) -> None:
        """Save the full state as checkpoint ``checkpoint_id``, writing only what is new.

        ``meta`` (JSON-serialisable) is stored in the same manifest, so the caller's own
        state (scan layout, batch ids, counters) commits atomically with the operator's.

        New H_S chunks, new s_B pieces and a changed H_R are written once; each
        checkpoint adds the per-value entries, the match flags of live slots, the unread
        stream buffer and a manifest.
        """
        files: list[str] = []
        chunks = []
        for ch in self._queue:
            name = f"chunk-{ch.base}.arrow"
            if not store.exists(name):
                sl = np.arange(ch.base, ch.base + ch.n, dtype=np.int64) & (len(self._ring_key) - 1)
                rows = self._hs_rows.take(np.arange(ch.base, ch.base + ch.n, dtype=np.int64))
                t = rows.append_column("__ssbj_key", pa.array(self._ring_key[sl]))
                t = t.append_column("__ssbj_next", pa.array(self._ring_next[sl]))
                t = t.append_column("__ssbj_bytes", pa.array(self._ring_bytes[sl]))
                store.write_table(name, t)
            files.append(name)
            chunks.append({"base": ch.base, "n": ch.n, "p0": ch.p0, "nbytes": ch.nbytes, "file": name})
        hr_name = f"hr-{self._hr_version}.arrow"
        if not store.exists(hr_name):
            t = self._hr_table.append_column("__ssbj_key", pa.array(self._hr_keys, pa.int64()))
            t = t.append_column("__ssbj_part", pa.array(self._hr_part, pa.int64()))
            store.write_table(hr_name, t.append_column("__ssbj_src", pa.array(self._hr_src, pa.int64())))
        files.append(hr_name)
        sb = []
        for t, k, p, sid in self._sb:
            name = f"sb-{sid}.arrow"
            if not store.exists(name):
                t2 = t.append_column("__ssbj_key", pa.array(k, pa.int64()))
                store.write_table(name, t2.append_column("__ssbj_part", pa.array(p, pa.int64())))
            files.append(name)
            sb.append(name)
        buf_name = f"buf-{checkpoint_id}.arrow"
        rest = [b.table.slice(b.pos) for b in self._buffer]
        store.write_table(buf_name, pa.concat_tables(rest) if rest else self.stream_schema.empty_table())
        files.append(buf_name)
        state_name = f"state-{checkpoint_id}.npz"
        live = np.arange(self._live_lo, self._next_slot, dtype=np.int64) & (len(self._ring_key) - 1)
        store.write_arrays(
            state_name,
            {"records": self._kt.records(), "matched": np.packbits(self._ring_matched[live])},
        )
        files.append(state_name)
        manifest: dict[str, Any] = {
            "version": 1,
            "spec": {
                "stream_key": self.spec.stream_key,
                "master_key": self.spec.master_key,
                "master_columns": self._proj,
                "algorithm": self.spec.algorithm,
            },
            "step": self._step,
            "rc": self._rc,
            "p": self._p,
            "k": self._k,
            "cycle_start": {str(k): v for k, v in self._cycle_start.items()},
            "live_lo": self._live_lo,
            "next_slot": self._next_slot,
            "ring_cap": len(self._ring_key),
            "index_cap": len(self._kt.tkeys),
            "record_cap": len(self._kt.rstate),
            "chunks": chunks,
            "hr": hr_name,
            "hr_version": self._hr_version,
            "sb": sb,
            "sb_seq": self._sb_seq,
            "buffer": buf_name,
            "state": state_name,
            "chunk_bytes": self._chunk_bytes,
            "disk_buffer_bytes": self._disk_buffer_bytes,
            "hr_bytes": self._hr_bytes,
            "sb_bytes": self._sb_bytes,
            "sb_peak": self._sb_peak,
            "disk_buffer_peak": self._disk_buffer_peak,
            "buffer_bytes": self._buffer_bytes,
            "vs_avg": self._vs_avg,
            "vr_avg": self._vr_avg,
            "counters": asdict(self._c),
            "files": files,
            "meta": meta or {},
        }
        store.write_manifest(checkpoint_id, manifest)

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
        _, m = store.read_manifest(checkpoint_id)
        saved = m["spec"]
        mine = {
            "stream_key": spec.stream_key,
            "master_key": spec.master_key,
            "master_columns": op._proj,
            "algorithm": spec.algorithm,
        }
        if saved != mine:
            raise CheckpointError(f"checkpoint was taken for {saved}, not {mine}")
        op._step, op._rc, op._p, op._k = m["step"], m["rc"], m["p"], m["k"]
        op._cycle_start = {int(k): v for k, v in m["cycle_start"].items()}
        op._live_lo, op._next_slot = m["live_lo"], m["next_slot"]
        op._chunk_bytes, op._disk_buffer_bytes = m["chunk_bytes"], m["disk_buffer_bytes"]
        op._vs_avg, op._vr_avg = m["vs_avg"], m["vr_avg"]
        op._hr_bytes, op._sb_bytes, op._buffer_bytes = m["hr_bytes"], m["sb_bytes"], m["buffer_bytes"]
        op._sb_peak, op._disk_buffer_peak = m["sb_peak"], m["disk_buffer_peak"]
        counters = dict(m["counters"])
        op._c = _Counters(**counters)
        op._hr_version, op._sb_seq = m["hr_version"], m["sb_seq"]
        rcap = m["ring_cap"]
        op._ring_key = np.zeros(rcap, dtype=np.int64)
        op._ring_next = np.zeros(rcap, dtype=np.int64)
        op._ring_bytes = np.zeros(rcap, dtype=np.int64)
        op._ring_matched = np.zeros(rcap, dtype=np.uint8)
        mask = rcap - 1
        internal = ["__ssbj_key", "__ssbj_next", "__ssbj_bytes"]
        for c in m["chunks"]:
            t = store.read_table(c["file"])
            sl = np.arange(c["base"], c["base"] + c["n"], dtype=np.int64) & mask
            op._ring_key[sl] = t.column("__ssbj_key").to_numpy()
            op._ring_next[sl] = t.column("__ssbj_next").to_numpy()
            op._ring_bytes[sl] = t.column("__ssbj_bytes").to_numpy()
            op._queue.append(_Chunk(c["base"], c["n"], c["p0"], c["nbytes"]))
            op._hs_rows.append(c["base"], t.drop_columns(internal))
            op._hs_chunk_bytes += c["nbytes"]
        hr = store.read_table(m["hr"])
        op._hr_keys = hr.column("__ssbj_key").to_numpy().astype(np.int64)
        op._hr_part = hr.column("__ssbj_part").to_numpy().astype(np.int64)
        op._hr_src = hr.column("__ssbj_src").to_numpy().astype(np.int64)
        op._hr_table = hr.drop_columns(["__ssbj_key", "__ssbj_part", "__ssbj_src"])
        for name in m["sb"]:
            t = store.read_table(name)
            sid = int(name.split("-")[1].split(".")[0])
            op._sb.append(
                (
                    t.drop_columns(["__ssbj_key", "__ssbj_part"]),
                    t.column("__ssbj_key").to_numpy().astype(np.int64),
                    t.column("__ssbj_part").to_numpy().astype(np.int64),
                    sid,
                )
            )
        arrays = store.read_arrays(m["state"])
        live = np.arange(op._live_lo, op._next_slot, dtype=np.int64) & mask
        op._ring_matched[live] = np.unpackbits(arrays["matched"], count=len(live))
        kvs = arrays["records"]
        op._kt = KeyTable.from_records(kvs, m["record_cap"], m["index_cap"])
        op._hs_live = int(kvs[:, K.HS_COUNT].sum())
        op._cached_entries = int(np.count_nonzero(kvs[:, K.CACHED] == 1))
        buf = store.read_table(m["buffer"])
        if buf.num_rows:
            buf = buf.combine_chunks()
            op._buffer.append(_Buffered(buf, encode_keys(buf.column(spec.stream_key), op._family), row_nbytes(buf)))
        return op

    # ------------------------------------------------------------------ reporting
    def memory(self) -> MemoryReport:
        """Bytes per component (the stream buffer is reported but not part of the budget)."""
        return MemoryReport(
            h_s=self._hs_chunk_bytes + len(self._ring_key) * _SLOT_BYTES,
            h_r=self._hr_bytes,
            queue=len(self._queue) * _CHUNK_BYTES,
            disk_buffer=self._disk_buffer_bytes,
            switching_buffer=self._sb_bytes,
            key_table=self._kt.nbytes,
            stream_buffer=self._buffer_bytes,
            entries=self._kt.used,
        )

    def _metrics(
        self,
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
        predicted = self.cost_model.c_loop(StepCost(b=b, w_n=w_n + w_null, w_s=w_s, n_out=n_out))
        done = self._c.served_cache + self._c.served_disk + self._c.null_keys
        return StepMetrics(
            step=self._step - 1,
            r_cycle=self._rc,
            partition=p,
            partitions=self._k,
            fsm_state=FSM_NAMES.get(fsm, "meshjoin" if not self._use_cache else "warm-up"),
            w=w_n + w_s + w_null,
            w_n=w_n,
            w_s=w_s,
            null_keys=w_null,
            b=b,
            output_rows=n_out,
            c_loop_measured=c_loop,
            c_loop_predicted=predicted,
            io_seconds=io_s,
            cache_phase_seconds=cache_s,
            disk_phase_seconds=disk_s,
            service_rate=(w_n + w_s + w_null) / c_loop if c_loop > 0 else 0.0,
            cache_values=self._cached_entries,
            cache_rows=int(self._hr_table.num_rows),
            cache_bytes=int(self._hr_table.nbytes),
            hs_tuples=self.hs_tuples,
            chunk_bytes=self._chunk_bytes,
            served_cache_total=self._c.served_cache,
            served_disk_total=self._c.served_disk,
            completed_total=done,
            v_s=self._vs_avg,
            v_r=self._vr_avg,
            memory=self.memory(),
        )

    def totals(self) -> dict[str, float | int]:
        """Run-level counters; ``tuples_in == matched + unmatched + waiting`` always holds."""
        c = self._c
        return {
            "tuples_in": c.tuples_in,
            "matched_source_rows": c.matched,
            "unmatched_source_rows": c.unmatched,
            "waiting": self.waiting_tuples,
            "null_keys": c.null_keys,
            "served_by_cache": c.served_cache,
            "served_by_disk": c.served_disk,
            "output_rows": c.output_rows,
            "steps": c.steps,
            "r_cycles": self._rc,
            "switched_in": c.switched_in,
            "evicted": c.evicted,
            "busy_seconds": c.busy_seconds,
            "service_rate": (c.served_cache + c.served_disk + c.null_keys) / c.busy_seconds if c.busy_seconds else 0.0,
            "cache_share": c.served_cache / max(1, c.served_cache + c.served_disk + c.null_keys),
        }
