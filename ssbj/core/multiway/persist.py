"""Checkpoints of :class:`MultiWayJoin` in a :class:`DirectoryStore` (atomic, incremental).

A waiting chunk's rows never change, so each is written once (``mw-chunk-<id>.arrow``)
whatever store holds it; the matched flags of left edges, the caches, the statistics and
the bookkeeping are written per checkpoint. The manifest, written last, commits them.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.multiway.order import EdgeStats, Holt
from ssbj.core.multiway.store import Chunk
from ssbj.errors import CheckpointError

if TYPE_CHECKING:
    from ssbj.core.multiway.operator import MultiWayJoin

CACHE_TABLES = ("rows", "keys", "cand", "collected", "counts", "tags", "collected_tags")


def _holt(d: dict[str, Any]) -> Holt:
    return Holt(**d)


def meta(store: DirectoryStore, cid: int | None) -> dict[str, Any]:
    """Return the caller's ``meta`` of checkpoint ``cid`` (default: the newest)."""
    cid, m = store.read_manifest(cid)
    if m.get("kind") != "multiway":
        raise CheckpointError(f"checkpoint {cid} in {store.path} is not of a multi-way join")
    return dict(m.get("meta") or {})


def save(op: MultiWayJoin, store: DirectoryStore, cid: int, meta: dict[str, Any] | None = None) -> None:
    """Write checkpoint ``cid``.

    A chunk file is written once per operator incarnation: after a rollback, chunk ids are
    handed out again, and a file left by the rolled-back run must not stand for a new chunk.
    """
    files: list[str] = []
    flags: dict[str, np.ndarray] = {}
    chunks = []
    for edge, cs in op._chunks.items():
        for ch in cs:
            name = f"mw-chunk-{ch.id}.arrow"
            table, matched = op.store.get(edge, ch.id)
            if ch.id not in op._persisted or not store.exists(name):
                store.write_table(name, table)
                op._persisted.add(ch.id)
            files.append(name)
            if matched is not None:
                flags[f"f{ch.id}"] = matched
            chunks.append(asdict(ch))
    window: dict[str, Any] | None = None
    if op.window is not None:
        for side, kept in enumerate(op.window.chunks):
            for wc in kept:
                name = f"mw-chunk-{wc.id}.arrow"
                kept, matched = op.store.get(op.window.edge(side), wc.id)
                if wc.id not in op._persisted or not store.exists(name):
                    store.write_table(name, kept)
                    op._persisted.add(wc.id)
                files.append(name)
                if matched is not None:  # a left window's first-stream rows
                    flags[f"w{wc.id}"] = matched
        for side, schema in enumerate(op.window.schemas):
            if schema is not None:
                name = f"mw-window-schema-{side}-{cid}.arrow"
                store.write_table(name, schema.empty_table())
                files.append(name)
        window = op.window.state()
    for side, ledger in enumerate(op.ledgers):  # the second stream's ledger (window join) under a prefix
        flags.update({f"{'s1_' if side else ''}{k}": v for k, v in ledger.arrays().items()})
    fname = f"mw-flags-{cid}.npz"
    store.write_arrays(fname, flags)
    files.append(fname)
    caches: dict[str, Any] = {}
    for edge, cache in op.caches.items():
        present = []
        for key, t in cache.tables().items():
            if t is not None:
                name = f"mw-cache-{edge}-{key}-{cid}.arrow"
                store.write_table(name, t)
                files.append(name)
                present.append(key)
        caches[str(edge)] = {"present": present, "collecting": cache.collecting}
    if op._stream_schema is not None:
        name = f"mw-stream-schema-{cid}.arrow"
        store.write_table(name, op._stream_schema.empty_table())
        files.append(name)
    manifest = {
        "files": files,
        "kind": "multiway",
        "edges": [p.edge.master for p in op.edges],
        "step": op._step,
        "next_chunk": op._next_chunk,
        "p": op._p,
        "orders": [list(o) for o in op.orders],
        "chunks": chunks,
        "counters": op.counters,
        "busy_seconds": op.busy_seconds,
        "vs": op._vs,
        "disk_peak": op._disk_peak,
        "estats": [asdict(s) for s in op.estats],
        "reorder_log": op._reorder_log,
        "caches": caches,
        "stream_schema": op._stream_schema is not None,
        "meta": meta or {},
        "window": window,
    }
    store.write_manifest(cid, manifest)


def load(op: MultiWayJoin, store: DirectoryStore, cid: int | None) -> None:
    """Put ``op`` (freshly built with the same spec and options) in the saved state."""
    cid, m = store.read_manifest(cid)
    if m.get("kind") != "multiway" or m["edges"] != [p.edge.master for p in op.edges]:
        raise CheckpointError(f"checkpoint {cid} in {store.path} is not of this multi-way join")
    flags = store.read_arrays(f"mw-flags-{cid}.npz")
    op._step = m["step"]
    op._next_chunk = m["next_chunk"]
    op._p = list(m["p"])
    op.orders = [tuple(o) for o in m["orders"]]
    op.counters = dict(m["counters"])
    op.busy_seconds = m["busy_seconds"]
    op._vs = list(m["vs"])
    op._disk_peak = list(m["disk_peak"])
    op._reorder_log = list(m["reorder_log"])
    op.estats = []
    for d in m["estats"]:
        d = dict(d)
        for k in ("gamma", "mu", "kap"):
            d[k] = _holt(d[k])
        op.estats.append(EdgeStats(**d))
    if m["stream_schema"]:
        op._stream_schema = store.read_table(f"mw-stream-schema-{cid}.arrow").schema
    for edge, info in m["caches"].items():
        cache = op.caches.get(int(edge))
        if cache is None:
            raise CheckpointError(f"checkpoint {cid} has a cache for edge {edge}, this operator has none")
        tables: dict[str, pa.Table | None] = {k: None for k in CACHE_TABLES}
        for k in info["present"]:
            tables[k] = store.read_table(f"mw-cache-{edge}-{k}-{cid}.arrow")
        cache.load(tables, info["collecting"])
    if op.ledger is not None:
        if "ledger_ids" not in flags:
            raise CheckpointError(f"checkpoint {cid} was written without source-row tracking")
        op.ledger.load(flags)
        for side, ledger in enumerate(op.ledgers[1:], start=1):
            if "s1_ledger_ids" not in flags:
                raise CheckpointError(f"checkpoint {cid} was written without the second stream's source-row tracking")
            ledger.load({k[3:]: v for k, v in flags.items() if k.startswith(f"s{side}_")})
    op._chunks = {e: [] for e in op._chunks}
    op._persisted = set()
    op._fit_store()
    for d in m["chunks"]:
        ch = Chunk(**d)
        table = store.read_table(f"mw-chunk-{ch.id}.arrow")
        f = flags.get(f"f{ch.id}")
        op.store.put(ch.edge, ch.id, table, None if f is None else np.asarray(f, dtype=bool))
        op._chunks[ch.edge].append(ch)
        op._persisted.add(ch.id)
    w = m.get("window")
    if (w is None) != (op.window is None):
        raise CheckpointError(f"checkpoint {cid} in {store.path} does not match this operator's window join")
    if op.window is not None and w is not None:
        schemas = [
            store.read_table(f"mw-window-schema-{side}-{cid}.arrow").schema if present else None
            for side, present in enumerate(w["schemas"])
        ]
        op.window.load(w, schemas)
        op._fit_store()
        for side, kept in enumerate(op.window.chunks):
            for wc in kept:
                f = flags.get(f"w{wc.id}")
                matched = None if f is None else np.asarray(f, dtype=bool)
                op.store.put(op.window.edge(side), wc.id, store.read_table(f"mw-chunk-{wc.id}.arrow"), matched)
                op._persisted.add(wc.id)
