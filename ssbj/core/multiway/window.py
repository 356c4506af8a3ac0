"""A second stream joined with the first within an event-time band (``MultiWaySpec.window``).

Each stream's batch is one step of that stream. Its rows (filtered, projected, qualified)
probe the rows of the other stream kept so far (equality on the window keys, then the band
``b.time BETWEEN a.time - lower AND a.time + upper``), and are then kept themselves, one
chunk per batch in the operator's waiting store (so counted in the memory budget and
checkpointed with it), until the other stream's watermark passes the end of their window.
The watermark of a stream is the largest event time seen in it before the current batch
minus ``lateness``; a row below its own stream's watermark is late: counted and handed to
``late_sink`` (never joined, never silently dropped). Rows with a NULL key or time can
never match: on an inner window they are counted as ``window_unmatchable`` and not kept.
On a left window the first stream's rows carry matched flags (like a left edge's chunks)
and leave NULL-extended when evicted without a match, or at the end of the input. Kept
rows are evicted a whole chunk at a time, so a kept row may outlive its window; the band
test is exact either way.

Why this equals the batch join over the non-late rows: a pair is found by whichever row
arrives second, as long as the first is still kept, and a chunk is evicted only when no
row that is not late can fall in the window of any of its rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from ssbj.core.multiway.keyindex import KeyIndex
from ssbj.core.multiway.plan import qual
from ssbj.core.multiway.spec import MultiWaySpec, TimeOffset
from ssbj.errors import ConfigError, InputError

LateSink = Callable[[str, pa.Table], None]
RowsHook = Callable[[int, pa.Table], None]  # (side, rows) kept or released: the operator's source-row ledger


@dataclass
class WindowChunk:
    """Bookkeeping of one kept batch of a stream (its rows are in the waiting store)."""

    id: int
    side: int  # 0: the first stream, 1: the windowed stream
    tmax: int  # largest event time in it
    rows: int


def _micros(off: TimeOffset) -> int:
    if isinstance(off, timedelta):
        return (off.days * 86_400 + off.seconds) * 1_000_000 + off.microseconds
    return int(off)


def event_times(col: pa.ChunkedArray | pa.Array, offsets_are_time: bool) -> tuple[np.ndarray, np.ndarray]:
    """Event times as int64 (microseconds for timestamps) and a validity mask."""
    t = col.type
    if pa.types.is_timestamp(t):
        if not offsets_are_time:
            raise ConfigError(f"window: event-time column of type {t} needs interval bounds, not integers")
        try:
            col = col.cast(pa.timestamp("us", t.tz))
        except pa.ArrowInvalid as exc:
            raise InputError(f"window: event times below microsecond precision are not supported: {exc}") from exc
    elif pa.types.is_integer(t):
        if offsets_are_time:
            raise ConfigError(f"window: event-time column of type {t} needs integer bounds, not intervals")
    else:
        raise ConfigError(f"window: event-time column must be a timestamp or an integer, got {t}")
    ints = col.cast(pa.int64())
    valid = np.asarray(ints.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    values = np.asarray(ints.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return values, valid


class WindowState:
    """The two streams' kept rows, watermarks and counters; rows live in ``store`` (edges -1, -2)."""

    def __init__(self, spec: MultiWaySpec, second_columns: list[str], late_sink: LateSink | None = None) -> None:
        w = spec.window
        if w is None:
            raise ConfigError("multi-way join: the spec has no window")
        self.spec = spec
        self.left = w.kind == "left"  # first stream's rows without a match go on NULL-extended
        self.second_columns = [qual(w.stream, c) for c in second_columns]
        self.aliases = (spec.stream, w.stream)
        self.keys = ([qual(spec.stream, c) for c in w.probe_keys], [qual(w.stream, c) for c in w.keys])
        self.times = (qual(spec.stream, w.probe_time), qual(w.stream, w.time))
        self.lower, self.upper, self.lateness = _micros(w.lower), _micros(w.upper), _micros(w.lateness)
        self.is_time = isinstance(w.lateness, timedelta)
        self.late_sink = late_sink
        self.on_keep: RowsHook | None = None
        self.on_release: RowsHook | None = None
        self.max_time: list[int | None] = [None, None]
        self.chunks: list[list[WindowChunk]] = [[], []]
        self.schemas: list[pa.Schema | None] = [None, None]
        self.counters: dict[str, int] = {
            "window_rows_in": 0,
            "window_late": 0,
            "window_unmatchable": 0,
            "window_pairs": 0,
            "window_evicted_rows": 0,
            "window_null_extended": 0,
        }

    @staticmethod
    def edge(side: int) -> int:
        """Return the waiting store's edge id of a side's chunks."""
        return -1 - side

    def side_of(self, alias: str) -> int:
        """0 for the first stream, 1 for the windowed one."""
        if alias not in self.aliases:
            raise InputError(f"window join: {alias!r} is not a stream of this query (streams: {self.aliases})")
        return self.aliases.index(alias)

    def watermark(self, side: int) -> int | None:
        """Largest event time seen in that stream minus the lateness (None before any)."""
        m = self.max_time[side]
        return None if m is None else m - self.lateness

    @property
    def waiting_rows(self) -> int:
        """Rows of both streams kept now."""
        return sum(c.rows for cs in self.chunks for c in cs)

    def conform(self, side: int, rows: pa.Table) -> pa.Table:
        """Later batches in the types of the side's first one."""
        s = self.schemas[side]
        if s is None:
            self.schemas[side] = rows.schema
            return rows
        if rows.schema.equals(s):
            return rows
        try:
            return rows.cast(s)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
            raise InputError(f"stream {self.aliases[side]!r} batch does not match its first batch: {exc}") from exc

    def admit(
        self, side: int, rows: pa.Table, store: Any, new_chunk: Callable[[], int], fit: Callable[[], None]
    ) -> list[pa.Table]:
        """Join ``rows`` of one stream with the other's kept rows, keep them; return the joined rows.

        On a left window, rows of the first stream are kept whatever their key (a NULL never
        matches) and leave NULL-extended when evicted without a match.
        """
        rows = rows.combine_chunks()
        self.counters["window_rows_in"] += rows.num_rows
        t, valid = event_times(rows.column(self.times[side]), self.is_time)
        wm = self.watermark(side)
        late = valid & (t < wm) if wm is not None else np.zeros(rows.num_rows, bool)
        if late.any():
            self.counters["window_late"] += int(late.sum())
            if self.late_sink is not None:
                self.late_sink(self.aliases[side], rows.filter(pa.array(late)))
        ok = valid.copy()
        for c in self.keys[side]:
            ok &= np.asarray(rows.column(c).is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        live = ok & ~late
        self.counters["window_unmatchable"] += int((~ok & ~late).sum())
        on_time = valid & ~late
        if on_time.any():
            top = int(t[on_time].max())
            m = self.max_time[side]
            self.max_time[side] = top if m is None else max(m, top)
        out: list[pa.Table] = []
        if self.left and side == 0:
            self.counters["window_unmatchable"] -= int((~ok & ~late).sum())  # they leave NULL-extended
            live = ~late
        if live.any():
            keep = rows.filter(pa.array(live))
            tk, vk = t[live], valid[live]
            matched = np.zeros(keep.num_rows, bool) if self.left and side == 0 else None
            pairs = self._probe(side, keep, tk, vk, matched, store)
            if pairs is not None:
                out.append(pairs)
            fit()
            cid = new_chunk()
            store.put(self.edge(side), cid, keep, matched)
            if self.on_keep is not None:
                self.on_keep(side, keep)
            tmax = int(tk[vk].max()) if vk.any() else np.iinfo(np.int64).min // 2
            self.chunks[side].append(WindowChunk(cid, side, tmax, keep.num_rows))
        out += self._evict(store)
        return out

    def _null_extended(self, table: pa.Table, matched: np.ndarray | None) -> list[pa.Table]:
        """First-stream rows that met no row of the second, its columns NULL (left window only)."""
        if matched is None or matched.all():
            return []
        rows = table.filter(pa.array(~matched))
        s = self.schemas[1]
        for c in self.second_columns:
            rows = rows.append_column(c, pa.nulls(rows.num_rows, s.field(c).type if s is not None else pa.null()))
        self.counters["window_null_extended"] += rows.num_rows
        return [rows]

    def _probe(
        self, side: int, new: pa.Table, tn: np.ndarray, vn: np.ndarray, matched: np.ndarray | None, store: Any
    ) -> pa.Table | None:
        other = 1 - side
        idx = KeyIndex([new.column(c) for c in self.keys[side]])
        parts = []
        for ch in self.chunks[other]:
            kept, flags = store.get(self.edge(other), ch.id)
            li, ri = idx.match([kept.column(c) for c in self.keys[other]])
            if not len(li):
                continue
            tk, vk = event_times(kept.column(self.times[other]), self.is_time)
            ta, tb = (tn[ri], tk[li]) if side == 0 else (tk[li], tn[ri])
            band = (tb >= ta - self.lower) & (tb <= ta + self.upper) & vn[ri] & vk[li]
            if not band.any():
                continue
            li, ri = li[band], ri[band]
            if matched is not None:
                matched[ri] = True
            if flags is not None and not flags[li].all():
                flags = flags.copy()
                flags[li] = True
                store.set_matched(self.edge(other), ch.id, flags)
            a, b = (new.take(ri), kept.take(li)) if side == 0 else (kept.take(li), new.take(ri))
            for name, col in zip(b.column_names, b.columns, strict=True):
                a = a.append_column(name, col)
            parts.append(a)
        if not parts:
            return None
        out = pa.concat_tables(parts)
        self.counters["window_pairs"] += out.num_rows
        return out

    def _evict(self, store: Any) -> list[pa.Table]:
        """Drop chunks no on-time row of the other stream can match any more; return NULL-extended rows."""
        out: list[pa.Table] = []
        bounds = (self.upper, self.lower)  # a: t + upper < wm(b); b: s + lower < wm(a)
        for side in (0, 1):
            wm = self.watermark(1 - side)
            if wm is None:
                continue
            still = []
            for ch in self.chunks[side]:
                if ch.tmax + bounds[side] < wm:
                    out += self._drop(side, ch, store)
                else:
                    still.append(ch)
            self.chunks[side] = still
        return out

    # ------------------------------------------------------------------ checkpoint
    def state(self) -> dict[str, Any]:
        """Scalars and bookkeeping for a checkpoint manifest."""
        return {
            "max_time": self.max_time,
            "chunks": [asdict(c) for cs in self.chunks for c in cs],
            "counters": self.counters,
            "schemas": [s is not None for s in self.schemas],
        }

    def load(self, state: dict[str, Any], schemas: list[pa.Schema | None]) -> None:
        """Put the bookkeeping back (the caller puts the chunks' rows into the store)."""
        self.max_time = list(state["max_time"])
        self.counters = dict(state["counters"])
        self.chunks = [[], []]
        for d in state["chunks"]:
            ch = WindowChunk(**d)
            self.chunks[ch.side].append(ch)
        self.schemas = schemas

    def release(self, store: Any) -> list[pa.Table]:
        """End of both inputs: drop every kept row; return the first stream's unmatched ones NULL-extended (left)."""
        out: list[pa.Table] = []
        for side in (0, 1):
            for ch in self.chunks[side]:
                out += self._drop(side, ch, store)
            self.chunks[side] = []
        return out

    def _drop(self, side: int, ch: WindowChunk, store: Any) -> list[pa.Table]:
        """Delete a kept chunk; return its NULL-extended rows (left window, first stream)."""
        rows, matched = store.get(self.edge(side), ch.id)
        out = self._null_extended(rows, matched)
        if self.on_release is not None:
            self.on_release(side, rows)
        store.delete(self.edge(side), ch.id)
        self.counters["window_evicted_rows"] += ch.rows
        return out

    def stats(self) -> dict[str, Any]:
        """Counters, rows kept and watermarks, for the operator's stats."""
        return {
            **self.counters,
            "window_kept_rows": self.waiting_rows,
            "watermarks": {a: self.watermark(i) for i, a in enumerate(self.aliases)},
        }
