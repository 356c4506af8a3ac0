"""The disk phase (Algorithm 1, lines 24-38): probe H_S with every tuple of the disk buffer.

A compiled pass over the partition (:func:`ssbj.core.diskprobe.disk_probe`, in calls of a
bounded number of output pairs) does, per master tuple ``r``:

* the MESHJOIN probe: every tuple of ``r``'s value in H_S is an output pair (and is
  flagged matched); the chain walk also counts them, which is ``n`` of the inequality;
* the instrumentation (lines 28-36): in the *incrementing* R-cycle ``s_count`` of a
  tracked value grows; in the *switching* R-cycle the cache inequality is evaluated once
  per value, at its first master tuple of the R-cycle, and every tuple of a value that
  switches goes to the switching buffer s_B (so s_B receives all of its rows);
* for the cache refresh, the master tuples whose value is cached.

The inequality uses the bytes each choice really takes: ``n * (v_S + o_S)`` in H_S
(``o_S``: ring key, link and index share per tuple) against ``m * v_R + e_R`` in H_R
(``e_R``: the value's index entry), with the hysteresis factor ``s_f``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.core import budget as B
from ssbj.core.arrowtypes import plain_table, take_rows
from ssbj.core.complete import COMPLETE, TAKE_ALL, complete_piece, store_append, take_all_rows
from ssbj.core.diskprobe import disk_probe
from ssbj.core.hs import SWITCHING, eligible_before, since_mark
from ssbj.core.jit import njit
from ssbj.core.keys import EncodedKeys, encode_keys, encoded_in_place
from ssbj.core.master import partition_pieces
from ssbj.core.resident import BufferIds, buffer_ids
from ssbj.core.rowsize import held_nbytes, total_nbytes
from ssbj.core.scanacc import RefreshRows

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin

# mypy: disable-error-code="return-value,arg-type,no-any-return"

_ALL_VALID = np.zeros(0, dtype=bool)  # a validity array of no rows: every key is valid


# ---------------------------------------------------------------- the phase
def scan_partition(op: SemiStreamJoin, p: int, fsm: int, pairs: list[tuple[pa.Table, pa.Table]]) -> tuple[int, float]:
    """READ partition p (in pieces of ``disk_chunk_rows`` if the master can stream) and probe H_S with it.

    Returns the rows read and the seconds spent waiting for reads. Only one piece is live
    at a time: the disk buffer is charged the largest piece of the partition. The
    statistics, s_B, the scan bookkeeping and the matched flags accumulate per piece as
    they would over the whole partition (H_S and H_R do not change during the disk
    phase); the cache refresh runs once per partition (:class:`RefreshRows`).

    A master whose partitions are already in memory (:class:`ssbj.contracts.MasterResident`)
    is probed in one compiled pass over a view of the partition when its keys need no
    encoding (int64, no NULLs): nothing is read or copied, so there is no piece to hold,
    and the disk buffer is still charged one piece (what a streaming read would hold).
    """
    rows = op.spec.disk_chunk_rows
    t0 = time.perf_counter()
    resident = resident_view(op, p) if rows is not None else None
    if resident is not None:
        view, keys = resident
        waited = time.perf_counter() - t0
        acc = _accumulator(op, True)
        ids = acc.ids = buffer_ids(view)
        if acc.refresh and not op._complete and op._read_memo.unchanged(p, ids):
            acc.refresh = False  # the very buffers of p's last read: H_R is consistent with them already
            op._c.bump("refresh_skipped_unchanged")
        op._disk_buffer_bytes = 0
        disk_phase(op, p, view, fsm, pairs, acc, charge_rows=rows, keys=keys)
        n = _finish(op, p, acc, pairs, view.num_rows)
        op._read_memo.remember(p, view, ids)
        return n, waited
    whole = rows is None or getattr(op.master, "read_partition_chunks", None) is None
    pieces = partition_pieces(op.master, p, rows)
    acc = _accumulator(op, whole)
    op._disk_buffer_bytes = 0
    n = 0
    waited = 0.0
    while True:
        t0 = time.perf_counter()
        piece = next(pieces, None)
        waited += time.perf_counter() - t0
        if piece is None:
            break
        part = piece.select(op._mcols)
        if not part.schema.equals(op._master_layout):
            part = plain_table(part)
        n += part.num_rows
        disk_phase(op, p, part, fsm, pairs, acc)
    return _finish(op, p, acc, pairs, n), waited


def resident_view(op: SemiStreamJoin, p: int) -> tuple[pa.Table, EncodedKeys] | None:
    """Partition p as a view of a resident master, and its encoded keys; None if the master is not resident.

    int64 keys without NULLs are the partition's own buffer; other keys are the master's
    encoding of the whole column, made once (``resident_keys``), else the partition goes
    in pieces.
    """
    get = getattr(op.master, "resident_partition", None)
    if get is None:
        return None
    part = get(p).select(op._mcols)
    if not part.schema.equals(op._master_layout):
        part = plain_table(part)
    col = part.column(0)
    if encoded_in_place(col) and col.num_chunks == 1:  # (an empty table may have no chunk)
        return part, EncodedKeys(np.asarray(col.chunk(0).to_numpy(zero_copy_only=True)), _ALL_VALID)
    keys = getattr(op.master, "resident_keys", None)
    if keys is None:
        return None
    enc = keys(p, op.spec.master_key, op._family)
    return (part, enc) if len(enc.values) == part.num_rows else None


def _accumulator(op: SemiStreamJoin, whole: bool) -> RefreshRows:
    acc = RefreshRows(whole)
    # the same for every piece: H_S, H_R and the statistics do not change during the disk phase
    cache = op.cache
    acc.refresh = op.spec.refresh_cache and op._use_cache and ((cache.values + cache.empty_values) > 0 or op._complete)
    acc.costs = (op.tuple_cost(), op.row_cost(), op.entry_cost())
    return acc


def _finish(op: SemiStreamJoin, p: int, acc: RefreshRows, pairs: list[tuple[pa.Table, pa.Table]], n: int) -> int:
    if acc.slots:
        _pairs(op, acc, pairs)
    if (n or op._complete) and acc.refresh:  # (complete: a partition emptied drops its rows)
        acc.finish(op, p)
    return n


def _pairs(op: SemiStreamJoin, acc: RefreshRows, pairs: list[tuple[pa.Table, pa.Table]]) -> None:
    """Append the partition's output pairs, gathering H_S's tuples once for all pieces."""
    rel = acc.slots[0] if len(acc.slots) == 1 else np.concatenate(acc.slots)
    psl = rel.astype(np.int64) + op.hs.lo  # the disk phase does not move lo (expiry comes after)
    m = acc.masters[0] if len(acc.masters) == 1 else pa.concat_tables(acc.masters)
    acc.slots, acc.masters = [], []
    s = op.hs.take(psl)
    ok = op._verified(s, m)
    if ok is not None:
        s, m, psl = s.filter(ok), m.filter(ok), psl[ok]
    if op._verify:
        op.hs.mark_matched(psl)
    if len(psl):
        pairs.append((s, m))


def disk_phase(
    op: SemiStreamJoin,
    p: int,
    part: pa.Table,
    fsm: int,
    pairs: list[tuple[pa.Table, pa.Table]],
    acc: RefreshRows,
    charge_rows: int | None = None,
    keys: EncodedKeys | None = None,
) -> None:
    """Probe H_S with one piece of partition p held in the disk buffer (lines 24-38).

    ``charge_rows``: ``part`` is a resident partition's view with its encoded ``keys`` (see
    :func:`resident_view`), probed whole, with the disk buffer charged pieces of that many rows.
    """
    # int64 keys without NULLs are a view of the piece's own buffer (ssbj.core.keys); any
    # other encoding is a new buffer, a view of an Arrow result included (NULLs filled)
    own = not encoded_in_place(part.column(0))
    if charge_rows is None or keys is None:
        mk = encode_keys(part.column(0), op._family)
        keys_bytes = int((mk.values.nbytes if own else 0) + mk.valid.nbytes)
    else:  # what a piece's encoding would hold
        mk = keys
        keys_bytes = 9 * min(charge_rows, len(mk.values)) if own else 0
    if charge_rows is not None:
        _charge_pieces(op, p, part, charge_rows, keys_bytes, acc.ids)
    # the largest piece of the partition (a piece's nbytes costs ~16 us: with fixed-width
    # columns only, bytes grow with rows, so only a piece with more rows, or with NULL keys
    # (their encoding is a copy), can be larger)
    elif part.num_rows > acc.max_rows or not op._master_fixed or keys_bytes > op._disk_keys_bytes:
        acc.max_rows = max(acc.max_rows, part.num_rows)
        nbytes = int(part.nbytes) + keys_bytes
        if nbytes >= op._disk_buffer_bytes:
            op._disk_keys_bytes = keys_bytes
            op._disk_buffer_bytes = nbytes
    op._disk_buffer_peak = max(op._disk_buffer_peak, op._disk_buffer_bytes)
    if op._rc <= 1 or fsm in (1, 2) or op._vr_avg == 0:
        note_master_rows(op, part)
    if part.num_rows == 0:
        return
    if fsm == COMPLETE:  # H_S is empty: the refresh alone
        note_scan(op, mk.values, mk.valid)
        complete_piece(op, p, part, mk, acc)
        return
    if op._use_cache:
        note_scan(op, mk.values, mk.valid)
    hs, cache = op.hs, op.cache
    if op._use_cache:
        op.stats.grow(lambda: B.stats_limit(op))
    st = op.stats.table
    refresh = acc.refresh
    tuple_cost, row_cost, entry_cost = acc.costs
    eligible = eligible_before(op._rc, op._unique) if fsm == SWITCHING else -1
    most = B.probe_call_pairs(op)
    # when tracking began: 2 rc, + 1 past the R-cycle's first partition (a value is admitted
    # at its first row of a partition; rows of earlier partitions went uncounted)
    since = since_mark(op._rc, p == 0)
    start, n_empty = 0, 0
    rf: list[tuple[np.ndarray, np.ndarray]] = []  # the refresh's rows and H_R slots of each call
    while True:
        tracked, deferred = op.stats.size, int(op._sb_allow[1])
        pm, psl, sb, rf_row, rf_slot, empties, stop = disk_probe(
            mk.values,
            mk.valid,
            hs.hix,
            hs.ring_key,
            hs.link,
            hs.cap,
            hs.lo,
            hs.hi,
            not op._verify,
            fsm if op._use_cache else -1,
            op._rc,
            eligible,
            op.spec.switch_factor,
            tuple_cost,
            row_cost,
            entry_cost,
            st.keys,
            st.used,
            st.payload,
            op.stats.meta,
            since,
            refresh,
            cache.index.keys,
            cache.index.used,
            cache.empties.blob,
            op.interest.bits,
            op._sb_allow,
            op._early,
            start,
            most,
        )
        _count_call(op, tracked, deferred)
        # the kernel's arrays double as they fill: the whole buffers are held, not the views'
        # bytes; beside them the H_S slots kept for one take (acc.slots) and the refresh's rows
        kept = sum(held_nbytes(a) for a in acc.slots) + sum(held_nbytes(a) + held_nbytes(b) for a, b in rf)
        op._note_disk_transient(kept + sum(held_nbytes(a) for a in (pm, psl, sb, rf_row, rf_slot)))
        _to_sb(op, part, mk, sb, p)
        n_empty += int(empties)
        last = stop >= len(mk.values)
        if start == 0 and last:  # one call: one take for the pairs and the refresh
            _take(op, part, mk, acc, pm, psl, (rf_row, rf_slot), n_empty)
        else:
            _take(op, part, mk, acc, pm, psl, None, 0)
            if refresh:
                rf.append((rf_row, rf_slot))
            if last and refresh:  # the piece's refresh rows at once (RefreshRows.rows reads the whole piece)
                rows = (np.concatenate([a for a, _ in rf]), np.concatenate([b for _, b in rf]))
                _take(op, part, mk, acc, pm[:0], psl[:0], rows, n_empty)
        if sum(len(a) for a in acc.slots) >= most:  # (also across the pieces of a partition)
            _pairs(op, acc, pairs)  # H_S's rows of the pairs so far, taken at once
        if last:
            break
        start = int(stop)
    if fsm == TAKE_ALL:  # every row of a value not cached goes to s_B
        ix = cache.index
        sb = take_all_rows(mk.values, mk.valid, ix.keys, ix.used, cache.empties.blob, op.interest.bits)
        op._note_transient(sb.nbytes)
        if op._store is not None or op._take_all_void:  # written in place (ssbj.core.takeall)
            sb_keys = mk.values[sb]
            op._note_transient(sb_keys.nbytes)
            store_append(op, part, sb, sb_keys, p)
        else:
            _to_sb(op, part, mk, sb, p)


def _count_call(op: SemiStreamJoin, tracked: int, deferred: int) -> None:
    """Count what a kernel call decided (``tracked``, ``deferred``: the candidates and deferred switches before it)."""
    if op._sb_allow[1] > deferred:
        op._c.bump("switch_deferred", int(op._sb_allow[1]) - deferred)
    if op._early[1] or op._early[2]:
        op._c.bump("switch_early", int(op._early[1]))
        op._c.bump("switch_early_given_up", int(op._early[2]))
        op._early[1:] = 0
    if op._use_cache:
        op.interest.added += op.stats.size - tracked
        if op.interest.overfull:
            op.rebuild_interest()


def _take(
    op: SemiStreamJoin,
    part: pa.Table,
    mk: EncodedKeys,
    acc: RefreshRows,
    pm: np.ndarray,
    psl: np.ndarray,
    rf: tuple[np.ndarray, np.ndarray] | None,
    n_empty: int,
) -> None:
    """Take the pairs' master rows out of the piece, and the refresh's (``rf``: its rows and H_R slots, if due now)."""
    rows = acc.rows(op, part, mk.values, mk.valid, rf[0], rf[1], n_empty) if rf is not None and acc.refresh else None
    # one take for the pairs' and the refresh's rows (a take costs ~20-60 us whatever its size)
    if len(pm) and rows is not None:
        both = take_rows(part, np.concatenate([pm, rows]))
        acc.slots.append(_own(psl))
        acc.masters.append(both.slice(0, len(pm)).select(op._pair_idx))
        acc.keep(op, both.slice(len(pm)), mk.values, rows, len(rf[0]), rf[1])  # type: ignore[index]
    elif len(pm):
        acc.slots.append(_own(psl))
        acc.masters.append(take_rows(part.select(op._pair_idx), pm))
    elif rows is not None:
        acc.keep(op, take_rows(part, rows), mk.values, rows, len(rf[0]), rf[1])  # type: ignore[index]


def _own(a: np.ndarray) -> np.ndarray:
    """Return ``a``, or a copy if it is a small view of a larger buffer (kept till the take, it would hold it all)."""
    return a.copy() if held_nbytes(a) > 2 * a.nbytes + 64 else a


def _to_sb(op: SemiStreamJoin, part: pa.Table, mk: EncodedKeys, sb: np.ndarray, p: int) -> None:
    """Copy master rows ``sb`` of the piece into the switching buffer s_B."""
    if not len(sb):
        return
    op._sb_seq += 1
    t = take_rows(part, sb)
    op._sb.append((t, mk.values[sb], np.full(len(sb), p, dtype=np.int32), op._sb_seq))
    op._sb_bytes += int(t.nbytes) + 12 * len(sb)


def _charge_pieces(
    op: SemiStreamJoin, p: int, part: pa.Table, rows: int, keys_bytes: int, ids: BufferIds | None
) -> None:
    """Charge the disk buffer the largest piece of ``rows`` rows of resident partition p (and its keys).

    With variable-width columns every piece is measured (a slice's nbytes ~14 us: at 1% of R,
    391 pieces a partition), once per partition's buffers (``ids``).
    """
    n = part.num_rows
    if op._master_fixed:  # bytes grow with rows alone: measured once per piece size (a slice's nbytes ~100 us)
        m = min(n, rows)
        if m not in op._piece_bytes:
            op._piece_bytes[m] = int(part.slice(0, m).nbytes)
        nbytes = op._piece_bytes[m]
    elif n <= rows:
        nbytes = int(part.nbytes)
    else:
        known = op._read_memo.piece_bytes(p, ids, rows) if ids is not None else None
        nbytes = known if known is not None else max(int(part.slice(i, rows).nbytes) for i in range(0, n, rows))
        if known is None and ids is not None:
            op._read_memo.note_piece_bytes(p, ids, rows, nbytes)
    op._disk_keys_bytes = keys_bytes
    op._disk_buffer_bytes = nbytes + keys_bytes


@njit(cache=True, nogil=True)
def key_range(keys: np.ndarray, valid: np.ndarray, sc: np.ndarray) -> None:  # pragma: no cover
    """Add the valid ``keys`` (``valid`` empty: all) to the scan's rows, least and largest key ``sc``, in one pass."""
    every = valid.shape[0] == 0
    n = sc[0]
    lo, hi = sc[1], sc[2]
    for i in range(keys.shape[0]):
        if not every and not valid[i]:
            continue
        k = keys[i]
        if n == 0 or k < lo:
            lo = k
        if n == 0 or k > hi:
            hi = k
        n += 1
    sc[0], sc[1], sc[2] = n, lo, hi


def note_scan(op: SemiStreamJoin, keys: np.ndarray, valid: np.ndarray) -> None:
    """Every key the scan reads: into the R-filter, and the R-cycle's rows and key range (``valid`` empty: all)."""
    op.rfilter.add(keys, valid)
    key_range(keys, valid, op._scan)


def note_master_rows(op: SemiStreamJoin, rows: pa.Table) -> None:
    """Fold the bytes of master rows just read (a partition, or a lookup's) into v_R."""
    if rows.num_rows == 0:
        return
    seen = op._c.extra.get("master_rows_measured", 0)
    if op._fixed_row_bytes:  # fixed-width columns: every row the same bytes
        mb = float(op._fixed_row_bytes * rows.num_rows)
    else:
        mb = float(total_nbytes(rows.select(op._proj)))
    op._vr_avg = (op._vr_avg * seen + mb) / (seen + rows.num_rows)
    op._c.bump("master_rows_measured", rows.num_rows)
