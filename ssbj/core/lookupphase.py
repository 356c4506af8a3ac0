"""The hybrid step's lookup path (docs/hybrid.md): finish H_S by fetching its keys' rows.

Before partition ``p`` is read, the cost model may decide that fetching the master rows of
the distinct keys waiting in H_S (:class:`ssbj.contracts.MasterLookup`) is cheaper than
scanning on. Every tuple of H_S is then joined with the looked-up rows of exactly the
partitions it has not met in its R-cycle: a chunk that entered when partition ``p0`` was
next has met ``p0, ..., p - 1`` (cyclically), so a row of partition ``q`` is joined iff
``(q - p0) mod k >= (p - p0) mod k``. Each tuple thus meets every partition of R once,
from the scan or from the lookup, and finishes matched or unmatched as the scan would
finish it; H_S is then empty.

While H_S is empty and nothing cached needs the scan's refresh (no H_R rows, no empty
entries, no s_B), the scan idles instead of reading partitions no tuple waits for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.contracts import PARTITION_COLUMN, MasterLookup
from ssbj.core.arrowtypes import plain_table
from ssbj.core.hsindex import EMPTY
from ssbj.core.keys import decode_keys, encode_keys, is_exact
from ssbj.core.metrics import StepMetrics
from ssbj.errors import InputError

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin


@dataclass(frozen=True)
class LookupDone:
    """What one lookup path did (``offer``: index mode's candidates, :mod:`ssbj.core.indexmode`)."""

    tuples: int
    keys: int
    rows: int
    seconds: float
    offer: Offer | None = None


@dataclass(frozen=True)
class Fetched:
    """Master rows looked up by key: the rows (layout order), their encoded keys and partitions.

    ``order`` sorts the rows with a non-NULL key by encoded key (``sorted_keys``).
    """

    rows: pa.Table
    part: np.ndarray
    order: np.ndarray
    sorted_keys: np.ndarray
    nbytes: int

    def runs(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first position in ``order``, rows) of each of ``keys``."""
        lo = np.searchsorted(self.sorted_keys, keys, side="left")
        return lo, np.searchsorted(self.sorted_keys, keys, side="right") - lo


def run_positions(lo: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """Every position of the runs ``lo[i] .. lo[i] + cnt[i] - 1``, run after run."""
    total = int(cnt.sum())
    out: np.ndarray = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt) + np.repeat(lo, cnt)
    return out


@dataclass(frozen=True)
class Offer:
    """The distinct values a lookup path fetched, their tuples in the step and their rows."""

    keys: np.ndarray
    tuples: np.ndarray
    fetched: Fetched


def fetch(op: SemiStreamJoin, values: pa.Array) -> Fetched:
    """Look up the master rows of ``values`` (master key values; NULLs never match)."""
    t0 = time.perf_counter_ns()
    got = op.master.lookup(op.spec.master_key, values)  # type: ignore[attr-defined]
    op._c.bump("lookup_wait_us", (time.perf_counter_ns() - t0) // 1000)  # the master's time, round trips included
    part = np.asarray(got.column(PARTITION_COLUMN).to_numpy(zero_copy_only=False), dtype=np.int64)
    m = plain_table(got.select(op._mcols))
    mk = encode_keys(m.column(0), op._family)
    ok_rows = np.flatnonzero(mk.valid)
    order = ok_rows[np.argsort(mk.values[ok_rows], kind="stable")]
    nbytes = got.nbytes + mk.values.nbytes + mk.valid.nbytes + order.nbytes + part.nbytes
    return Fetched(m, part, order, mk.values[order], nbytes)


def supports_lookup(master: object) -> bool:
    """Whether ``master`` can look rows up by key."""
    return isinstance(master, MasterLookup)


def rows_per_key(op: SemiStreamJoin) -> float:
    """Master rows returned per key looked up so far (1 before the first lookup)."""
    keys = op._c.extra.get("lookup_keys", 0)
    return (op._c.extra.get("lookup_rows", 0) + 1.0) / (keys + 1.0)


def can_idle(op: SemiStreamJoin) -> bool:
    """Whether this step may skip its partition read (nothing waits for it, nothing needs its refresh)."""
    if op.spec.hybrid == "off" and op.hybrid_policy is None:
        return False
    if op.hs.live or len(op.hs.queue) or op._take_all or op._complete:  # (those read every partition)
        return False
    return not op._use_cache or (op.cache.values + op.cache.empty_values == 0 and not op._sb)


def choose_lookup(op: SemiStreamJoin) -> bool:
    """Decide this step: finish H_S by lookup now (True) or scan on (False)."""
    if op.hs.live == 0 or not op.lookup_ok:
        return False
    if op.hybrid_policy is not None:
        return bool(op.hybrid_policy(op))
    if op.spec.hybrid == "always":
        return True
    if op.spec.hybrid == "off":
        return False
    # auto: the lookup only saves work when the scan may then idle
    if op._use_cache and (op.cache.values + op.cache.empty_values or op._sb):
        return False
    keys = max(op.hs.values, 1)
    rows = keys * rows_per_key(op)
    b = max(1.0, op.master.num_rows / max(op._k, 1))
    if op.spec.memory_budget is not None and rows > b:
        return False  # the result takes the idle disk buffer's place: keep it within b rows
    batch = op.master.lookup_batch  # type: ignore[attr-defined]  # supports_lookup checked it
    # per chunk of arrivals: one lookup of all waiting chunks against one partition per chunk
    chunks = max(len(op.hs.queue), 1)
    model, measured = op.cost_model, op.path_costs
    if measured is None:
        return model.lookup_cost(keys, rows, batch) < chunks * model.scan_cost(b)
    return measured.choose(measured.lookup_cost(model, keys, rows, batch) < chunks * measured.scan_cost(model, b))


def lookup_phase(
    op: SemiStreamJoin, p: int, pairs: list[tuple[pa.Table, pa.Table]], unmatched: list[pa.Table]
) -> LookupDone:
    """Finish every tuple of H_S against the looked-up rows of the partitions it has not met."""
    t0 = time.perf_counter()
    hs = op.hs
    recs = hs.queue.records()
    slots = np.arange(hs.lo, hs.hi, dtype=np.int64)
    slots = slots[~hs.removed(slots)]
    n = len(slots)
    chunk = np.searchsorted(recs[:, 0], slots, side="right") - 1
    p0 = recs[chunk, 2]
    k = op._k
    met = (p - p0) % k  # partitions p0 .. p-1 already met
    srows = hs.take(slots)
    skeys = hs.keys_of(slots)
    values = _distinct_values(op, srows, skeys)
    f = fetch(op, values)
    m, part = f.rows, f.part
    lo, cnt = f.runs(skeys)
    total = int(cnt.sum())
    ti = np.repeat(np.arange(n, dtype=np.int64), cnt)
    ri = f.order[run_positions(lo, cnt)]
    keep = not_met(part[ri], p0[ti], met[ti], k)
    ti, ri = ti[keep], ri[keep]
    op._note_transient(f.nbytes + srows.nbytes + 16 * total)
    matched = hs.matched(slots)
    if len(ti):
        s, mm = srows.take(ti), m.take(ri)
        ok = op._verified(s, mm)
        if ok is not None:
            s, mm, ti = s.filter(ok), mm.filter(ok), ti[ok]
        if len(ti):
            pairs.append((s, mm))
            matched[ti] = True
    if not matched.all():
        unmatched.append(srows.filter(pa.array(~matched)))
    op._c.matched += int(np.count_nonzero(matched))
    op._c.served_lookup += n
    op._c.bump("lookup_keys", len(values))
    op._c.bump("lookup_rows", m.num_rows)
    op._c.bump("lookups")
    offer = None
    if op.spec.hybrid == "index":
        uk, nt = np.unique(skeys, return_counts=True)
        offer = Offer(uk, nt, f)
    _clear_hs(op)
    return LookupDone(n, len(values), m.num_rows, time.perf_counter() - t0, offer)


def not_met(part: np.ndarray, p0: np.ndarray, met: np.ndarray, k: int) -> np.ndarray:
    """Mask of rows (of partitions ``part``) not yet met by tuples that entered at ``p0`` and met ``met``."""
    out: np.ndarray = (part - p0) % k >= met
    return out


def _distinct_values(op: SemiStreamJoin, srows: pa.Table, skeys: np.ndarray) -> pa.Array:
    """Distinct join keys of ``srows`` as master key values (NULL keys never enter H_S)."""
    mtype = op._master_layout.field(0).type
    if pa.types.is_dictionary(mtype):
        mtype = mtype.value_type
    if is_exact(op._family):
        # the encoding is lossless; an out-of-range value wraps, and the re-match by
        # encoded key below drops whatever rows it fetches
        return decode_keys(np.unique(skeys), mtype, op._family)
    col = srows.column(op.spec.stream_key).unique()
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    try:
        return col.cast(mtype)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InputError(f"stream keys cannot be looked up as master keys of type {mtype}: {exc}") from exc


def _clear_hs(op: SemiStreamJoin) -> None:
    """Empty H_S and Q (every tuple has finished); the ring and index keep their capacity."""
    hs = op.hs
    hs.rows.drop_before(hs.hi)
    hs.hix.fill(EMPTY)
    hs.values = 0
    hs.live = 0
    hs.row_bytes = 0
    while len(hs.queue):
        hs.queue.pop()


def with_lookup(metrics: StepMetrics, path: str, done: LookupDone | None, served_total: int) -> StepMetrics:
    """Return the step's metrics with what the hybrid step did."""
    if done is None:
        return replace(metrics, path=path, served_lookup_total=served_total)
    return replace(
        metrics,
        path=path,
        lookup_tuples=done.tuples,
        lookup_keys=done.keys,
        lookup_rows=done.rows,
        lookup_seconds=done.seconds,
        served_lookup_total=served_total,
    )
