"""Checkpoint and exact restore of a :class:`~ssbj.core.operator.SemiStreamJoin`.

Written once: each H_S chunk (its rows, encoded keys and chain links, which never change),
each piece of s_B, H_R's rows whenever they changed (``hr-<version>``). Written at every
checkpoint: the flags of the live H_S slots (matched, removed; two bits each), H_R's
index and empty entries (their f_counts change with every hit), the value statistics,
the R-filter's bits,
the unread stream buffer, and the manifest with the scalars. The value index of H_S is
rebuilt on restore from the live slots (it only points at each value's newest tuple).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ssbj.core import budget as B
from ssbj.core import switchroom as SR
from ssbj.core import takeall as TA
from ssbj.core.cache import _row_keys
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.hsindex import EMPTY, ix_rebuild
from ssbj.core.interest import MAPPING as INTEREST_MAPPING
from ssbj.core.keys import encode_keys
from ssbj.core.rfilter import FilterState
from ssbj.core.rowsize import row_nbytes
from ssbj.core.spec import Buffered, Counters
from ssbj.errors import CheckpointError

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin

VERSION = 2
_KEY, _DELTA, _SRC = "__ssbj_key", "__ssbj_delta", "__ssbj_src"


def _spec_of(op: SemiStreamJoin) -> dict[str, Any]:
    return {
        "stream_key": op.spec.stream_key,
        "master_key": op.spec.master_key,
        "master_columns": op._proj,
        "algorithm": op.spec.algorithm,
    }


def save(op: SemiStreamJoin, store: DirectoryStore, checkpoint_id: int, meta: dict[str, Any] | None) -> None:
    """Write checkpoint ``checkpoint_id`` of ``op`` (see the module doc)."""
    hs = op.hs
    files: list[str] = []
    recs = hs.queue.records()
    for base, n, _, _ in recs:
        name = f"chunk-{int(base)}.arrow"
        if not store.exists(name):
            slots = np.arange(base, base + n, dtype=np.int64)
            t = hs.take(slots)
            t = t.append_column(_KEY, pa.array(hs.keys_of(slots), pa.int64()))
            deltas = hs.deltas(slots)
            store.write_table(name, t.append_column(_DELTA, pa.array(deltas, pa.int64())))
        files.append(name)
    hr_name = f"hr-{op.cache.version}.arrow"
    if not store.exists(hr_name):
        store.write_table(hr_name, op.cache.table().append_column(_SRC, pa.array(op.cache.src, pa.int32())))
    files.append(hr_name)
    sb = []
    for t, k, p, sid in op._sb:
        name = f"sb-{sid}.arrow"
        if not store.exists(name):
            t2 = t.append_column(_KEY, pa.array(k, pa.int64()))
            store.write_table(name, t2.append_column(_SRC, pa.array(p, pa.int32())))
        files.append(name)
        sb.append(name)
    store_meta = None
    if op._store is not None:  # the take-all's s_B written in place: its rows so far
        st = op._store
        store_meta = {"name": f"sbstore-{op._sb_seq}.arrow", "cap": st.cap}
        if not store.exists(store_meta["name"]):
            t = st.table().append_column(_KEY, pa.array(st.keys[: st.n], pa.int64()))
            store.write_table(store_meta["name"], t.append_column(_SRC, pa.array(st.src[: st.n], pa.int32())))
        files.append(store_meta["name"])
    buf_name = f"buf-{checkpoint_id}.arrow"
    rest = [b.table.slice(b.pos) for b in op._buffer]
    store.write_table(buf_name, pa.concat_tables(rest) if rest else op.stream_schema.empty_table())
    files.append(buf_name)
    live = np.arange(hs.lo, hs.hi, dtype=np.int64)
    ix_k, ix_p = op.cache.index.entries()
    st_k, st_p = op.stats.entries()
    rf = op.rfilter
    state_name = f"state-{checkpoint_id}.npz"
    store.write_arrays(
        state_name,
        {
            "matched": np.packbits(hs.matched(live)),
            "removed": np.packbits(hs.removed(live)),
            "ix_keys": ix_k,
            "ix_pay": ix_p,
            # the empty entries' packed arrays as they are (older checkpoints: em_keys, em_pay)
            "em_blob": op.cache.empties.blob,
            "em_counts": op.cache.empties.counts,
            "st_keys": st_k,
            "st_pay": st_p,
            "interest_bits": op.interest.bits,
            "door_cur": op.doorkeeper.cur,
            "door_prev": op.doorkeeper.prev,
            "rf_active": rf.active.bits if rf.active is not None else np.zeros(0, np.uint64),
            "rf_building": rf.building.bits if rf.building is not None else np.zeros(0, np.uint64),
        },
    )
    files.append(state_name)
    manifest: dict[str, Any] = {
        "version": VERSION,
        "spec": _spec_of(op),
        "unique_key": op._unique,
        "per_value_fsm": op._per_value_fsm(),
        "step": op._step,
        "rc": op._rc,
        "p": op._p,
        "cycle_open": op._cycle_open,
        "k": op._k,
        "cycle_start": {str(k): v for k, v in op._cycle_start.items()},
        "lo": hs.lo,
        "hi": hs.hi,
        "ring_cap": hs.cap,
        "index_cap": int(hs.hix.shape[0]),
        "queue": recs.tolist(),
        "queue_cap": int(hs.queue.nbytes // (8 * hs.queue.FIELDS)),
        "hs_live": hs.live,
        "hs_row_bytes": hs.row_bytes,
        "hr": hr_name,
        "hr_version": op.cache.version,
        "ix_cap": op.cache.index.cap,
        "em_since": op.cache.empties.since,
        "st_cap": op.stats.table.cap,
        "st_max": op.stats.max_values,
        "st_peak": op.stats.peak,
        "st_admit": int(op.stats.meta[2]),
        "interest": [op.interest.planned, op.interest.added],
        "interest_mapping": INTEREST_MAPPING,
        "sb": sb,
        "sb_seq": op._sb_seq,
        "buffer": buf_name,
        "state": state_name,
        "chunk_bytes": op._chunk_bytes,
        "chunk_carry": op._chunk_carry,
        "disk_buffer_bytes": op._disk_buffer_bytes,
        "disk_buffer_peak": op._disk_buffer_peak,
        "disk_keys_bytes": op._disk_keys_bytes,
        "values_share": op._values_share,
        "transient_per_tuple": op._transient_per_tuple,
        "sb_bytes": op._sb_bytes,
        "sb_allow": op._sb_allow.tolist(),
        "switch_plan": list(op._switch_plan),
        "early_rows": int(op._early[0]),
        "index_mode": op.spec.hybrid == "index",
        "index_read": op._ix_read,
        "index_tick": op._ix_tick,
        "doorkeeper_added": op.doorkeeper.added,
        "transient_peak": op._transient_peak,
        "rebuild_peak": op._rebuild_peak,
        "start_rebuild_peak": op._start_rebuild_peak,
        "cache_transient_peak": op._cache_transient_peak,
        "buffer_bytes": op._buffer_bytes,
        "vs_avg": op._vs_avg,
        "vr_avg": op._vr_avg,
        "plan": asdict(op._plan),
        "rfilter": {
            "active": rf.active.to_meta() if rf.active is not None else None,
            "building": rf.building.to_meta() if rf.building is not None else None,
            "scan": op._scan.tolist(),
            "scan_last": op._scan_last.tolist(),
            "mark": list(op._rf_mark),
            "pending": op._rf_pending,
        },
        "counters": asdict(op._c),
        "complete": {
            "take_all": op._take_all,
            "pending": op._take_all_pending,
            "complete": op._complete,
            "reserve": op._take_all_reserve,
            "store": store_meta,
            "store_failed": op._store_failed,
            "void": op._take_all_void,
        },
        "files": files,
        "meta": meta or {},
    }
    store.write_manifest(checkpoint_id, manifest)


def load(op: SemiStreamJoin, store: DirectoryStore, checkpoint_id: int | None) -> None:
    """Put ``op`` (freshly constructed) into the state of a checkpoint."""
    _, m = store.read_manifest(checkpoint_id)
    if m.get("version") != VERSION:
        raise CheckpointError(
            f"checkpoint format {m.get('version')} is not this operator's ({VERSION}); start from a new checkpoint"
        )
    if m["spec"] != _spec_of(op):
        raise CheckpointError(f"checkpoint was taken for {m['spec']}, not {_spec_of(op)}")
    if bool(m.get("index_mode", False)) != (op.spec.hybrid == "index"):
        # index mode reads no partition: a scan's s_B or take-all cannot complete there, and a
        # cache filled by lookups holds rows the scan's refresh does not know how to replace
        raise CheckpointError(
            "checkpoint was taken with join.hybrid "
            + ("'index'" if m.get("index_mode") else "not 'index'")
            + f", restored with {op.spec.hybrid!r}: restore with the same setting, or start from an empty state"
        )
    per_value = bool(m.get("per_value_fsm", m.get("unique_key", False)))
    if per_value and not op._per_value_fsm():
        # s_B was filled for a phase-out at the next R-cycle start: Algorithm 1's cycles would
        # stop filling it or add to it twice
        raise CheckpointError(
            "checkpoint was taken with a switching FSM per value (switching 'pipelined' or a unique master "
            "key), not Algorithm 1's R-cycles: restore it with switching 'pipelined', or start from an empty state"
        )
    op._step, op._rc, op._p, op._k = m["step"], m["rc"], m["p"], m["k"]
    op._ix_read = int(m.get("index_read", 0))
    op._ix_tick = int(m.get("index_tick", 0))
    op._cycle_open = bool(m.get("cycle_open", op._p != 0))  # older checkpoints: the scan never idled
    op._cycle_start = {int(k): v for k, v in m["cycle_start"].items()}
    op._chunk_bytes, op._chunk_carry = m["chunk_bytes"], int(m.get("chunk_carry", 0))
    op._disk_buffer_bytes, op._disk_buffer_peak = m["disk_buffer_bytes"], m["disk_buffer_peak"]
    op._disk_keys_bytes = int(m.get("disk_keys_bytes", 0))
    op._values_share = float(m.get("values_share", 1.0))
    op._transient_per_tuple = float(m.get("transient_per_tuple", 0.0))
    op._sb_bytes, op._sb_seq = m["sb_bytes"], m["sb_seq"]
    if "sb_allow" in m:  # older checkpoints: planned again at the next R-cycle start, unbounded until then
        op._sb_allow[:] = m["sb_allow"]
        op._switch_plan = (int(m["switch_plan"][0]), int(m["switch_plan"][1]))
    else:
        op._sb_allow[:] = (SR.UNLIMITED, 0)
    op._early[:] = (int(m.get("early_rows", 0)), 0, 0)  # older checkpoints: off until the next R-cycle start
    op._transient_peak, op._buffer_bytes = m["transient_peak"], m["buffer_bytes"]
    op._rebuild_peak = int(m.get("rebuild_peak", 0))  # (older checkpoints: the R-cycle starts' in it too)
    op._start_rebuild_peak = int(m.get("start_rebuild_peak", 0))
    op._cache_transient_peak = int(m.get("cache_transient_peak", 0))  # older checkpoints: measured again
    op._vs_avg, op._vr_avg = m["vs_avg"], m["vr_avg"]
    op._plan = B.Plan(**m["plan"])
    op._c = Counters(**m["counters"])
    cc = m.get("complete") or {}  # older checkpoints: no complete cache
    op._take_all, op._complete = bool(cc.get("take_all", False)), bool(cc.get("complete", False))
    op._take_all_pending = bool(cc.get("pending", False))
    op._take_all_reserve = int(cc.get("reserve", 0))
    op._store_failed, op._take_all_void = bool(cc.get("store_failed", False)), bool(cc.get("void", False))
    if cc.get("store"):
        t = store.read_table(cc["store"]["name"])
        op._store = TA.RowStore(op._master_layout, int(cc["store"]["cap"]))
        keys = t.column(_KEY).to_numpy().astype(np.int64)
        op._store.append(t.drop_columns([_KEY, _SRC]), None, keys, t.column(_SRC).to_numpy())
    arrays = store.read_arrays(m["state"])
    _load_hs(op, store, m, arrays)
    hr = store.read_table(m["hr"])
    op.cache.load(
        hr.drop_columns([_SRC]),
        hr.column(_SRC).to_numpy(),
        arrays["ix_keys"],
        arrays["ix_pay"],
        m["ix_cap"],
        arrays["em_keys"] if "em_keys" in arrays else np.zeros(0, np.int64),
        arrays["em_pay"] if "em_pay" in arrays else np.zeros(0, np.uint8),
        op._k,
    )
    if "em_blob" in arrays:
        op.cache.empties.load_packed(arrays["em_blob"], arrays["em_counts"], int(m.get("em_since", 0)))
    op.cache.version = m["hr_version"]
    if len(_row_keys(op.cache.index.keys, op.cache.index.used, op.cache.index.payload, op.cache.rows)) != op.cache.rows:
        raise CheckpointError("H_R rows and index of the checkpoint disagree")
    op.stats.load(
        arrays["st_keys"],
        arrays["st_pay"],
        m["st_cap"],
        m["st_max"],
        int(m.get("st_peak", 0)),
        int(m.get("st_admit", 2)),
    )
    if not per_value and op._per_value_fsm() and not op._unique:
        op.stats.demote_undecided(op._rc)
    if "interest_bits" in arrays:  # the filter as saved: its size enters the budget of the next steps
        op.interest.load(arrays["interest_bits"], *m["interest"])
        if m.get("interest_mapping", 1) != INTEREST_MAPPING:  # same size, bits set by today's mapping
            st, cache = op.stats.table, op.cache
            op.interest.refill(st.keys[st.used], cache.index.keys[cache.index.used], cache.empties.keys)
    else:  # older checkpoints
        op.rebuild_interest()
    if "door_cur" in arrays:  # (older checkpoints: an empty doorkeeper, values offered at their second lookup)
        op.doorkeeper.load(arrays["door_cur"], arrays["door_prev"], int(m.get("doorkeeper_added", 0)))
    _load_rfilter(op, m.get("rfilter"), arrays)
    for name in m["sb"]:
        t = store.read_table(name)
        sid = int(name.split("-")[1].split(".")[0])
        op._sb.append(
            (
                t.drop_columns([_KEY, _SRC]),
                t.column(_KEY).to_numpy().astype(np.int64),
                t.column(_SRC).to_numpy().astype(np.int32),
                sid,
            )
        )
    buf = store.read_table(m["buffer"])
    if buf.num_rows:
        buf = buf.combine_chunks()
        keys = encode_keys(buf.column(op.spec.stream_key), op._family)
        op._buffer.append(Buffered(buf, keys, row_nbytes(buf)))


def _load_rfilter(op: SemiStreamJoin, m: dict[str, Any] | None, arrays: dict[str, np.ndarray]) -> None:
    if not m:  # a checkpoint from before the R-filter: it is planned again
        return
    for name in ("active", "building"):
        if m[name] is not None:
            setattr(op.rfilter, name, FilterState.from_meta(m[name], arrays[f"rf_{name}"]))
    op._scan = np.asarray(m["scan"], dtype=np.int64)
    op._scan_last = np.asarray(m["scan_last"], dtype=np.int64)
    op._rf_mark = (int(m["mark"][0]), int(m["mark"][1]))
    op._rf_pending = int(m.get("pending", 0))  # older checkpoints: none deferred


def _load_hs(op: SemiStreamJoin, store: DirectoryStore, m: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    hs = op.hs
    lo, hi, cap = m["lo"], m["hi"], m["ring_cap"]
    hs.rows.lo = hs.rows.hi = lo
    hs.set_capacity(cap)
    hs.rows.lo = hs.rows.hi = lo
    for base, n, p0, nbytes in m["queue"]:
        t = store.read_table(f"chunk-{base}.arrow")
        if t.num_rows != n or hs.hi != base:
            raise CheckpointError(f"chunk-{base}.arrow does not continue the ring at slot {hs.hi}")
        slots = np.arange(base, base + n, dtype=np.int64)
        hs.ring_key[slots % cap] = t.column(_KEY).to_numpy()
        hs.set_deltas(slots, t.column(_DELTA).to_numpy())
        hs.rows.append(t.drop_columns([_KEY, _DELTA]))
        hs.queue.push(base, n, p0, nbytes)
    if hs.hi != hi:
        raise CheckpointError(f"the checkpoint's chunks end at slot {hs.hi}, not {hi}")
    hs.queue.resize(m["queue_cap"])
    n = hi - lo
    matched = np.unpackbits(arrays["matched"], count=n).astype(bool)
    removed = np.unpackbits(arrays["removed"], count=n).astype(bool)
    live = np.arange(lo, hi, dtype=np.int64)
    hs.mark_matched(live[matched])
    hs.mark_removed(live[removed])
    # the index points at each value's newest live tuple
    slots = np.arange(lo, hi, dtype=np.int64)[~removed]
    keys = hs.ring_key[slots % cap]
    _, last = np.unique(keys[::-1], return_index=True)
    heads = slots[::-1][last]
    hs.hix = np.full(max(m["index_cap"], 8), EMPTY, dtype=np.uint32)
    ix_rebuild(hs.hix, heads.astype(np.int64), hs.ring_key, cap)
    hs.values = len(heads)
    hs.live, hs.row_bytes = m["hs_live"], m["hs_row_bytes"]
