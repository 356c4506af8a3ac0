"""The multi-way enrichment operator: one stream, N master tables, one tree of equi-joins.

A stream batch is one step's arrivals (w). Its rows go through the edges in the current
probe order (a row keeps the order it entered with until it leaves). An edge to a master
held whole is probed at once; an edge to a scanned master first asks that master's cache
(:mod:`ssbj.core.multiway.edgecache`), and the rows its cache does not serve wait in the
waiting store as one chunk until they have met every partition of that master
(MESHJOIN's R-cycle): each step every scanned master with waiting rows reads its next
partition and probes all of its chunks. Matches go on to the next edge at once; a chunk
that has met all K partitions leaves: on an inner edge its rows without any match are
dropped, on a left edge they go on NULL-extended. So a row leaves only when every edge on
its path is resolved. Rows past the last edge are the result.

Memory (``memory_budget``, real ``nbytes``): masters held whole (table and index), each
scanned master's partition buffer (the largest seen) and cache; what is left is the
waiting store's limit. The in-memory store refuses to go past it; the LSM-tree store
(:mod:`ssbj.adapters.lsmstore`) spills instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from ssbj.contracts import MasterScan
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.multiway import order as O
from ssbj.core.multiway import persist, probing
from ssbj.core.multiway.edgecache import EdgeCache
from ssbj.core.multiway.lineage import SOURCE_COLUMN, SourceLedger, note, source_ids, stream_counts
from ssbj.core.multiway.plan import EdgePlan, build_edges, needed_columns, prepare_input, qual
from ssbj.core.multiway.spec import MultiWaySpec
from ssbj.core.multiway.store import Chunk, MemoryStore, WaitingStateOverflow, WaitingStore
from ssbj.core.multiway.window import LateSink, WindowState
from ssbj.errors import ConfigError, InputError

StoreFactory = Callable[[], WaitingStore]


class MultiWayJoin:
    """See the module doc. ``process`` one batch per step, ``drain`` at the end of the input."""

    def __init__(
        self,
        spec: MultiWaySpec,
        masters: Mapping[str, pa.Table | MasterScan],
        memory_budget: int,
        *,
        order_policy: str = "dppick",
        initial_order: tuple[int, ...] | None = None,
        period: int = 4,
        store: WaitingStore | None = None,
        hold: Mapping[str, bool] | None = None,
        hold_share: float = 0.5,
        partition_rows: Mapping[str, int] | int | None = None,
        partition_share: float = 0.05,
        cache_share: float = 0.1,
        use_cache: bool = True,
        track_sources: bool = False,
        late_sink: LateSink | None = None,
    ) -> None:
        if memory_budget <= 0:
            raise ConfigError(f"memory_budget must be > 0 bytes, got {memory_budget}")
        if order_policy not in O.POLICIES:
            raise ConfigError(f"order_policy must be one of {O.POLICIES}, got {order_policy!r}")
        if period < 1:
            raise ConfigError(f"period must be >= 1 step, got {period}")
        self.spec = spec
        self.budget = memory_budget
        self.policy = order_policy
        self.period = period
        self._need = needed_columns(spec)
        # source-row accounting (lineage.py): every stream row carries its id through the joins;
        # with a window join each stream has its own ids and ledger (a pair carries both ids)
        self.ledgers: list[SourceLedger] = [SourceLedger() for _ in spec.streams] if track_sources else []
        self.ledger: SourceLedger | None = self.ledgers[0] if self.ledgers else None
        self._srcs = [qual(a, SOURCE_COLUMN) for a in spec.streams]
        self._src = self._srcs[0]
        if self.ledger is not None:
            for a in spec.streams:
                self._need[a] = [*self._need[a], SOURCE_COLUMN]
        self._user_late_sink = late_sink
        self._late_ids: list[np.ndarray] = []
        # a second stream joined within an event-time window (window.py); its rows wait in self.store
        self.window = (
            WindowState(spec, self._need[spec.window.stream], self._late if track_sources else late_sink)
            if spec.window is not None
            else None
        )
        if self.window is not None and self.ledgers:
            self.window.on_keep = lambda side, rows: self.ledgers[side].waits(self._side_ids(side, rows))
            self.window.on_release = lambda side, rows: self.ledgers[side].leaves(self._side_ids(side, rows))
        self._persisted: set[int] = set()  # chunks this incarnation wrote or loaded (persist.py)
        self.edges: list[EdgePlan] = build_edges(
            spec, masters, memory_budget, hold, hold_share, partition_rows, partition_share
        )
        self._needs = [p.needs for p in self.edges]
        init = tuple(range(len(self.edges))) if initial_order is None else tuple(initial_order)
        if sorted(init) != list(range(len(self.edges))) or not O.valid(init, self._needs):
            raise ConfigError(
                f"initial_order {init} is not an order of the edges that probes each input after it is joined"
            )
        self.initial_order = init
        self.orders: list[tuple[int, ...]] = [init]
        self.store: WaitingStore = store if store is not None else MemoryStore()
        self._out_names = [o.name for o in spec.output]
        self._out_cols = [qual(o.alias, o.column) for o in spec.output]
        scanned = [p for p in self.edges if not p.held]
        self.caches: dict[int, EdgeCache] = {}
        if use_cache:
            for p in scanned:
                cap = int(cache_share * memory_budget / max(len(scanned), 1))
                self.caches[p.index] = EdgeCache(len(p.key_cols), p.key_cols, cap)
        self.estats = [
            O.EdgeStats(kappa=float(p.index_.keys if p.index_ is not None else p.num_rows)) for p in self.edges
        ]
        self._p = [0] * len(self.edges)  # next partition of each scanned master
        self._chunks: dict[int, list[Chunk]] = {p.index: [] for p in scanned}
        self._next_chunk = 0
        self._step = 0
        self._disk_peak = [0] * len(self.edges)
        self._vs = [0.0] * len(self.edges)  # bytes per waiting row at each edge (v_S)
        self.counters: dict[str, int] = {
            "tuples_in": 0,
            "tuples_filtered": 0,
            "output_rows": 0,
            "steps": 0,
            "partitions_read": 0,
            "served_by_cache": 0,
            "reorders": 0,
            "rows_probed": 0,  # rows that probed an edge (held, cache, or entering a scan)
            "source_rows_out": 0,  # stream rows finished with at least one result row (track_sources)
            "source_rows_dropped": 0,  # stream rows finished without one: filtered or no inner match
        }
        if self.window is not None and self.ledgers:  # per stream (side 0, 1); late rows are neither out nor dropped
            for side in (0, 1):
                for k in ("rows_in", "source_rows_out", "source_rows_dropped", "source_rows_late"):
                    self.counters[f"{k}.{side}"] = 0
        self.busy_seconds = 0.0
        self._peak = 0
        self._reorder_log: list[dict[str, Any]] = []
        self._stream_schema: pa.Schema | None = None
        self._fit_store()

    # ------------------------------------------------------------------ memory
    def fixed_bytes(self) -> int:
        """Budgeted bytes outside the waiting store."""
        total = 0
        for p in self.edges:
            if p.held:
                total += p.held_bytes()
            else:
                disk = self._disk_peak[p.index] or int(p.b * p.row_bytes)
                total += disk
                cache = self.caches.get(p.index)
                if cache is not None:
                    total += max(cache.nbytes(), cache.capacity)
        ledger = sum(lg.nbytes() for lg in self.ledgers)
        kept = sum(len(c) for c in self.window.chunks) if self.window is not None else 0
        return total + ledger + 64 * (kept + sum(len(c) for c in self._chunks.values()))

    def _fit_store(self) -> None:
        limit = self.budget - self.fixed_bytes()
        if limit <= 0:
            msg = (
                f"memory_budget {self.budget} leaves no room for waiting tuples: the masters held whole, the "
                f"partition buffers and caches take {self.fixed_bytes()} bytes"
            )
            if self._step == 0 and not any(self._chunks.values()):
                raise ConfigError(msg)
            raise WaitingStateOverflow(msg)
        self.store.set_limit(limit)

    def memory(self) -> dict[str, int]:
        """Bytes held per component, and the total counted against the budget."""
        held = sum(p.held_bytes() for p in self.edges if p.held)
        caches = sum(c.nbytes() for c in self.caches.values())
        disk = sum(self._disk_peak)
        store = self.store.memory_bytes()
        ledger = sum(lg.nbytes() for lg in self.ledgers)
        return {
            "held_masters": held,
            "caches": caches,
            "partition_buffers": disk,
            "waiting_store": store,
            "waiting_on_disk": self.store.disk_bytes(),
            "source_ledger": ledger,
            "total": held + caches + disk + store + ledger,
            "budget": self.budget,
        }

    # ------------------------------------------------------------------ input
    @property
    def order(self) -> tuple[int, ...]:
        """The probe order rows entering now follow."""
        return self.orders[-1]

    def process(self, batch: pa.Table | pa.RecordBatch, stream: str | None = None, *, end: bool = False) -> pa.Table:
        """One step: admit ``batch`` (may be empty), scan one partition of each waited-on master.

        ``stream`` names the stream the batch is of (default: ``spec.stream``); with a window
        join, batches of either stream; ``end``: both streams have ended, release the kept rows.
        """
        t0 = time.perf_counter()
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        out: list[pa.Table] = []
        alias = self.spec.stream if stream is None else stream
        if alias not in self.spec.streams:
            raise InputError(f"multi-way join: {alias!r} is not a stream of this query (streams: {self.spec.streams})")
        if table.num_rows and self.window is not None:
            n = table.num_rows
            side = self.window.side_of(alias)
            ids = self._tag_side(side, table) if self.ledgers else None
            if ids is not None:
                table = table.append_column(SOURCE_COLUMN, pa.array(ids))
            self.counters["tuples_in"] += n
            rows = self.window.conform(side, prepare_input(table, alias, self._need[alias], self.spec))
            self.counters["tuples_filtered"] += n - rows.num_rows
            for pairs in self.window.admit(side, rows, self.store, self._new_chunk_id, self._fit_store):
                self._admit_rows(pairs, out)
            if ids is not None:  # late rows are accounted as late (dead letters), not as admitted
                late = np.concatenate(self._late_ids) if self._late_ids else np.zeros(0, np.int64)
                self._late_ids = []
                self.counters[f"source_rows_late.{side}"] += len(late)
                self.ledgers[side].admitted(np.setdiff1d(ids, late, assume_unique=True) if len(late) else ids)
        elif table.num_rows:
            n = table.num_rows
            if self.ledger is not None:
                if SOURCE_COLUMN in table.column_names:
                    raise InputError(f"stream batch has a column named {SOURCE_COLUMN!r}, which the operator adds")
                ids = np.arange(self.counters["tuples_in"], self.counters["tuples_in"] + n, dtype=np.int64)
                table = table.append_column(SOURCE_COLUMN, pa.array(ids))
                self.ledger.admitted(ids)
            self.counters["tuples_in"] += n
            rows = prepare_input(table, self.spec.stream, self._need[self.spec.stream], self.spec)
            self.counters["tuples_filtered"] += n - rows.num_rows
            self._admit_rows(rows, out)
        if end and self.window is not None:  # no row comes any more: kept rows can match nothing
            for rows in self.window.release(self.store):
                self._admit_rows(rows, out)
        for p in self.edges:
            if not p.held and self._chunks[p.index]:
                probing.scan(self, p, out)
        self._step += 1
        self.counters["steps"] += 1
        if self._step % self.period == 0:
            self._reorder()
        self._peak = max(self._peak, self.memory()["total"])
        result = self._result(out)
        self.counters["output_rows"] += result.num_rows
        for side, ledger in enumerate(self.ledgers):
            done_out, done_dropped = ledger.settle()
            self.counters["source_rows_out"] += done_out
            self.counters["source_rows_dropped"] += done_dropped
            if self.window is not None:
                self.counters[f"source_rows_out.{side}"] += done_out
                self.counters[f"source_rows_dropped.{side}"] += done_dropped
        self.busy_seconds += time.perf_counter() - t0
        return result

    def _admit_rows(self, rows: pa.Table, out: list[pa.Table]) -> None:
        """Route stream rows (with a window: joined pairs) into the master edges."""
        if self._stream_schema is None:
            self._stream_schema = rows.schema
        elif not rows.schema.equals(self._stream_schema):
            try:  # later batches in the types of the first (a file's batches may differ in width)
                rows = rows.cast(self._stream_schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
                raise InputError(f"stream batch does not match the first batch's columns: {exc}") from exc
        if rows.num_rows:
            probing.route(self, rows, len(self.orders) - 1, 0, out)

    def _tag_side(self, side: int, table: pa.Table) -> np.ndarray:
        """Source ids of a window stream's new rows (its own sequence); checks the column is free."""
        if SOURCE_COLUMN in table.column_names:
            raise InputError(f"stream batch has a column named {SOURCE_COLUMN!r}, which the operator adds")
        key = f"rows_in.{side}"
        start = self.counters[key]
        self.counters[key] += table.num_rows
        return np.arange(start, start + table.num_rows, dtype=np.int64)

    def _late(self, alias: str, rows: pa.Table) -> None:
        """Late rows of a window stream: noted for the ledger, handed to the caller's sink (with their id column)."""
        side = self.spec.streams.index(alias)
        self._late_ids.append(self._side_ids(side, rows))
        if self._user_late_sink is not None:
            self._user_late_sink(alias, rows)

    def _side_ids(self, side: int, table: pa.Table) -> np.ndarray:
        return source_ids(table, self._srcs[side])

    def _note(self, event: str, table: pa.Table) -> None:
        note(self.ledgers, self._srcs, event, table)

    def _new_chunk_id(self) -> int:
        cid = self._next_chunk
        self._next_chunk += 1
        return cid

    @property
    def waiting_source_rows(self) -> int:
        """Stream rows with rows still waiting (``track_sources``; 0 without it), over both streams."""
        return sum(lg.pending for lg in self.ledgers)

    def stream_counts(self) -> dict[str, dict[str, int]]:
        """Per stream alias (``track_sources``): rows in = output + dropped + late + waiting."""
        return stream_counts(self.counters, self.spec.streams, self.ledgers, self.window is not None)

    @property
    def waiting_rows(self) -> int:
        """Intermediate rows waiting in the store."""
        return sum(c.rows for cs in self._chunks.values() for c in cs)

    def drain(self, release_window: bool = True) -> Iterator[pa.Table]:
        """End of a bounded input: step until no row waits.

        ``release_window=False``: rows kept for a window join stay (more rows of the streams
        may come later, e.g. the next run of a pipeline); only the masters' scans finish.
        """
        if release_window and self.window is not None and self.window.waiting_rows:
            yield self.process(pa.table({}), end=True)
        while any(self._chunks.values()):
            yield self.process(pa.table({}))

    # ------------------------------------------------------------------ output
    def _result(self, out: list[pa.Table]) -> pa.Table:
        if not out:
            return pa.table(
                {n: pa.array([], self._out_type(c)) for n, c in zip(self._out_names, self._out_cols, strict=True)}
            )
        for o in out:
            self._note("emitted", o)
        t = pa.concat_tables([o.select(self._out_cols) for o in out])
        return t.rename_columns(self._out_names)

    def _out_type(self, col: str) -> pa.DataType:
        alias = col.split(".", 1)[0]
        if alias in self.spec.streams:
            s = self._stream_schema
            return s.field(col).type if s is not None and col in s.names else pa.null()
        for p in self.edges:
            if p.edge.master == alias:
                return p.master_types[p.master_cols.index(col)]
        return pa.null()

    # ------------------------------------------------------------------ probe order
    def edge_costs(self, smoothing: bool = True) -> list[O.EdgeCost]:
        """Return the cost model's view of every edge for the coming cycle."""
        costs = []
        for p, st in zip(self.edges, self.estats, strict=True):
            g, m, kap = st.estimate(smoothing)
            costs.append(O.EdgeCost(g, m, kap, 1 if p.held else p.k, p.left))
        return costs

    def _reorder(self) -> None:
        for st in self.estats:
            st.close()
        if self.policy == "fixed":
            return
        costs = self.edge_costs(self.policy != "dppick-nosmooth")
        new = O.choose(self.policy, self.initial_order, costs, self._needs)
        if new != self.order:
            self.orders.append(new)
            self.counters["reorders"] += 1
            self._reorder_log.append({"step": self._step, "order": list(new)})

    # ------------------------------------------------------------------ reporting
    def stats(self) -> dict[str, Any]:
        """Counters, memory, the probe orders used, which masters were held or scanned."""
        return {
            **self.counters,
            "waiting_rows": self.waiting_rows,
            "waiting_source_rows": self.waiting_source_rows,
            "busy_seconds": self.busy_seconds,
            "memory": self.memory(),
            "peak_memory": self._peak,
            "order_policy": self.policy,
            "initial_order": [self.edges[e].edge.master for e in self.initial_order],
            "final_order": [self.edges[e].edge.master for e in self.order],
            "reorder_log": [
                {"step": r["step"], "order": [self.edges[e].edge.master for e in r["order"]]} for r in self._reorder_log
            ],
            "masters": {p.edge.master: {"held": p.held, "partitions": p.k, "partition_rows": p.b} for p in self.edges},
            "cache_values": {self.edges[i].edge.master: c.admitted for i, c in self.caches.items()},
            **(self.window.stats() if self.window is not None else {}),
        }

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(self, store: DirectoryStore, checkpoint_id: int, meta: dict[str, Any] | None = None) -> None:
        """Save the state as checkpoint ``checkpoint_id`` (chunks are written once); ``meta`` goes into its manifest."""
        persist.save(self, store, checkpoint_id, meta)

    @staticmethod
    def checkpoint_meta(store: DirectoryStore, checkpoint_id: int | None = None) -> dict[str, Any]:
        """Return the ``meta`` saved with a checkpoint (e.g. the pipeline's master layouts), without restoring it."""
        return persist.meta(store, checkpoint_id)

    @classmethod
    def restore(
        cls,
        ckpt: DirectoryStore,
        spec: MultiWaySpec,
        masters: Mapping[str, pa.Table | MasterScan],
        memory_budget: int,
        checkpoint_id: int | None = None,
        **options: Any,
    ) -> MultiWayJoin:
        """Return an operator in exactly the state saved by :meth:`checkpoint` (same options)."""
        op = cls(spec, masters, memory_budget, **options)
        persist.load(op, ckpt, checkpoint_id)
        return op
