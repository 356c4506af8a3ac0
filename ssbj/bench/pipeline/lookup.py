# ruff: noqa: S608 - SQL text is built from the case's fixed column names and %s placeholders only
"""The Flink-style lookup join: an LRU cache with expire-after-write TTL in front of the database.

Per stream tuple: the cache, else one point query ``SELECT key, columns FROM customer WHERE
key = %s`` (``lookup_lru``, as Flink does), or the distinct misses of a micro-batch in batched
``IN`` lists (``lookup_lru_in``, not what Flink does; labelled as such).  Rows are written
with the same SQL sink as the ssbj job.  In case b a key has several master rows: the cache
holds all of them, and its capacity counts rows.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.adapters.sink_sql import SqlTableSink
from ssbj.bench.pipeline.harness import Harness, MethodResult, TimedOut, Unsupported
from ssbj.bench.pipeline.measure import DbCounters
from ssbj.bench.pipeline.spec import NEW_SEGMENT, Json
from ssbj.config import arrow_type, parse_config
from ssbj.pipeline.job import source_frame
from ssbj.pipeline.records import decoder

_MISS = object()
Rows = tuple[tuple[Any, ...], ...]  # the master rows of one key (empty: no master row)
MASTER_TYPES = {"c_custkey": pa.int64(), "c_name": pa.string(), "c_segment": pa.string(), "c_balance": pa.float64()}


class LruTtlCache:
    """Flink's lookup cache: LRU over at most ``max_rows`` rows, expire-after-write ``ttl`` seconds.

    Missing keys are cached too (Flink's ``lookup.partial-cache.caching-missing-key``, default
    true) and count as one row; a key with several master rows counts each.
    """

    def __init__(self, max_rows: int, ttl: float) -> None:
        self.max_rows = max_rows
        self.ttl = ttl
        self.d: OrderedDict[int, tuple[float, Rows]] = OrderedDict()
        self.rows = 0
        self.hits = self.misses = self.expired = self.evictions = self.db_keys = 0

    def __len__(self) -> int:
        return len(self.d)

    @staticmethod
    def _weight(rows: Rows) -> int:
        return max(1, len(rows))

    def _get(self, k: int, now: float) -> Any:
        e = self.d.get(k)
        if e is None:
            self.misses += 1
            return _MISS
        if e[0] <= now:
            del self.d[k]
            self.rows -= self._weight(e[1])
            self.expired += 1
            return _MISS
        self.d.move_to_end(k)
        self.hits += 1
        return e[1]

    def _put(self, k: int, rows: Rows, now: float) -> None:
        old = self.d.get(k)
        if old is not None:
            self.rows -= self._weight(old[1])
        self.d[k] = (now + self.ttl, rows)
        self.d.move_to_end(k)
        self.rows += self._weight(rows)
        while self.rows > self.max_rows and len(self.d) > 1:
            _, (_, gone) = self.d.popitem(last=False)
            self.rows -= self._weight(gone)
            self.evictions += 1

    def lookup_each(self, keys: list[int], fetch_one: Callable[[int], Rows]) -> tuple[list[int], list[tuple[Any, ...]]]:
        """Per tuple: cache, else one point query. Returns (index of the tuple of each output row, its master row)."""
        idx: list[int] = []
        found: list[tuple[Any, ...]] = []
        clock = time.monotonic
        for i, k in enumerate(keys):
            if k is None:
                continue
            rows = self._get(k, clock())
            if rows is _MISS:
                rows = fetch_one(k)
                self.db_keys += 1
                self._put(k, rows, clock())
            for row in rows:
                idx.append(i)
                found.append(row)
        return idx, found

    def lookup_batch(
        self, keys: list[int], fetch_many: Callable[[list[int]], dict[int, Rows]]
    ) -> tuple[list[int], list[tuple[Any, ...]]]:
        """Cache first; the distinct misses of the batch in IN lists; then the same output as lookup_each."""
        clock = time.monotonic
        resolved: dict[int, Any] = {}
        missing: list[int] = []
        for k in keys:
            if k is None:
                continue
            if k in resolved:  # served without a lookup of its own, as in lookup_each
                self.hits += 1
                continue
            rows = self._get(k, clock())
            if rows is _MISS:
                resolved[k] = _MISS
                missing.append(k)
            else:
                resolved[k] = rows
        if missing:
            got = fetch_many(missing)
            self.db_keys += len(missing)
            now = clock()
            for k in missing:
                rows = got.get(k, ())
                resolved[k] = rows
                self._put(k, rows, now)
        idx: list[int] = []
        found: list[tuple[Any, ...]] = []
        for i, k in enumerate(keys):
            for row in resolved.get(k, ()) if k is not None else ():
                idx.append(i)
                found.append(row)
        return idx, found

    def entry_bytes_estimate(self) -> float:
        """Python bytes per cached row (key, value tuple, row tuples and fields, dict slot)."""
        sample = list(self.d.items())[:1000]
        if not sample:
            return 0.0
        total, rows = 0, 0
        for k, (exp, rs) in sample:
            total += sys.getsizeof(k) + sys.getsizeof((exp, rs)) + sys.getsizeof(exp) + sys.getsizeof(rs) + 100
            total += sum(sys.getsizeof(row) + sum(sys.getsizeof(x) for x in row) for row in rs)
            rows += self._weight(rs)
        return total / rows


class _OutOfTime(Exception):
    """The method's time limit passed inside a micro-batch."""


class LookupMethod:
    """The lookup join over the same Kafka source, one point query per miss or IN lists per batch."""

    def __init__(self, name: str, label: str, batched_in: bool) -> None:
        self.name = name
        self.label = label
        self.batched_in = batched_in

    def supports_shards(self, shards: int) -> str | None:
        """Refuse P > 1: a lookup join has no shards."""
        return None if shards == 1 else "the lookup join runs in the driver's foreachBatch; it has no shards"

    def run(self, h: Harness) -> MethodResult:
        """Run the lookup join over the whole topic."""
        why = self.supports_shards(h.shards)
        if why is not None:
            raise Unsupported(why)
        case, batched_in = h.case, self.batched_in
        table = f"wh_{self.name}"
        ck = h.fresh(table)
        res = MethodResult(self.name, self.label)
        cfg = parse_config(h.job_config("ssbj", table), f"bench {self.name}")
        max_rows = max(1, int(cfg.join.memory // h.data.master_row_bytes))
        cache = LruTtlCache(max_rows, h.scale.ttl_s)
        st = h.staleness()
        decode = decoder(cfg)
        cols = list(case.master_columns)
        out_schema = pa.schema(
            [pa.field(n, arrow_type(t)) for n, t in case.stream_schema] + [pa.field(c, MASTER_TYPES[c]) for c in cols]
        )
        db = h.db
        state: dict[str, Any] = {"consumed": 0, "decode": 0.0, "lookup": 0.0, "write": 0.0, "batches": 0}
        state |= {"max_entries": 0, "max_rows": 0, "timed_out": False}
        tl = h.timeline()
        t0 = time.perf_counter()
        sink = SqlTableSink(db.sa_url_full, table)
        sink.prepare(out_schema)
        conn = db.user()
        cur = conn.cursor()
        select = f"SELECT {', '.join([case.master_key, *cols])} FROM customer WHERE {case.master_key}"

        stop_at: list[float | None] = [None]  # set when the query starts

        def out_of_time() -> None:
            if stop_at[0] is not None and time.monotonic() > stop_at[0]:
                raise _OutOfTime

        def fetch_one(k: int) -> Rows:
            out_of_time()
            cur.execute(f"{select} = %s", (k,))
            return tuple(cur.fetchall())

        def fetch_many(ks: list[int]) -> dict[int, Rows]:
            out: dict[int, list[tuple[Any, ...]]] = {}
            for lo in range(0, len(ks), 1000):
                out_of_time()
                part = ks[lo : lo + 1000]
                cur.execute(f"{select} IN ({','.join(['%s'] * len(part))})", part)
                for row in cur.fetchall():
                    out.setdefault(int(row[0]), []).append(row)
            return {k: tuple(v) for k, v in out.items()}

        hot = pa.array(h.data.hot_keys, pa.int64())
        lru_stale: Json = {"tuples": 0, "seconds": 0.0, "how": "lookup loop: arrival position of the last stale tuple"}

        def foreach(df: Any, batch_id: int) -> None:
            if state["timed_out"]:
                return  # the rest of the topic is skipped: the run is reported as timed out
            try:
                run_batch(df, batch_id)
            except _OutOfTime:
                state["timed_out"] = True

        def run_batch(df: Any, batch_id: int) -> None:
            st.maybe_update(db, state["consumed"], batch_id - 1)
            ta = time.perf_counter()
            raw = df.toArrow()
            tr = time.perf_counter()
            rows = decode(raw).rows
            tb = time.perf_counter()
            keys = rows.column(case.stream_key).to_pylist()
            if batched_in:
                idx, found = cache.lookup_batch(keys, fetch_many)
            else:
                idx, found = cache.lookup_each(keys, fetch_one)
            tc = time.perf_counter()
            looked_up = time.monotonic()
            out = rows.take(pa.array(idx, pa.int64())).select([n for n, _ in case.stream_schema])
            arrays = list(out.columns)
            arrays += [pa.array([r[1 + j] for r in found], MASTER_TYPES[c]) for j, c in enumerate(cols)]
            table_out = pa.Table.from_arrays(arrays, schema=out_schema)
            if st.update_time is not None and st.update_position is not None and table_out.num_rows:
                # tuples are looked up in arrival order: the last stale one gives the exact window
                mask = pc.and_(
                    pc.is_in(table_out.column(case.row_id), value_set=hot),
                    pc.not_equal(table_out.column("c_segment"), NEW_SEGMENT),
                )
                where = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
                if where.size:
                    arrival = state["consumed"] + idx[int(where[-1])]  # tuples read before it, in the stream
                    lru_stale["tuples"] = arrival + 1 - st.update_position
                    lru_stale["seconds"] = looked_up - st.update_time
            sink.write(batch_id, 0, table_out)
            td = time.perf_counter()
            tl.add("collect", ta, tr)  # Spark runs the Kafka read and brings the rows to the driver
            tl.add("decode", tr, tb)
            tl.add("lookup", tb, tc)
            tl.add("write", tc, td)
            state["consumed"] += raw.num_rows
            state["decode"] += tb - ta
            state["lookup"] += tc - tb
            state["write"] += td - tc
            state["batches"] += 1
            state["max_entries"] = max(state["max_entries"], len(cache))
            state["max_rows"] = max(state["max_rows"], cache.rows)
            st.batch_done[(batch_id, 0)] = time.monotonic()

        before = h.counters.snapshot()
        try:
            with h.rss() as rss:
                t1 = time.perf_counter()
                tl.start()
                stop_at[0] = h.deadline()
                query = (
                    source_frame(h.spark, cfg)
                    .writeStream.foreachBatch(foreach)
                    .option("checkpointLocation", str(ck))
                    .trigger(availableNow=True)
                    .start()
                )
                h.await_query(query, self.name, lambda: int(state["consumed"]))
                tl.stop()
                t2 = time.perf_counter()
        finally:
            cur.close()
            conn.close()
            sink.close()
        after = h.counters.snapshot()
        if query.exception() is not None:
            raise RuntimeError(f"{self.name}: {query.exception()}")
        if state["timed_out"]:
            n = int(state["consumed"])
            raise TimedOut(
                f"{self.name}: out of time after {h.method_timeout:g} s inside a micro-batch, with {n:,} of "
                f"{h.scale.tuples:,} tuples written"
            )
        res.tuples = int(state["consumed"])
        res.setup_seconds = t1 - t0
        res.wall_seconds = t2 - t1
        res.tuples_per_second = res.tuples / res.wall_seconds
        res.join_service_rate = res.tuples / state["lookup"] if state["lookup"] else None
        res.phase_seconds = {"decode": state["decode"], "lookup": state["lookup"], "write": state["write"]}
        res.timeline = tl.result()
        row_bytes = h.data.master_row_bytes
        res.memory = {
            "budget_bytes": cfg.join.memory,
            "cache_max_rows": max_rows,
            "cache_peak_entries": state["max_entries"],
            "cache_peak_rows": state["max_rows"],
            "cache_peak_bytes_at_arrow_row_size": int(state["max_rows"] * row_bytes),
            "cache_peak_bytes_python_estimate": int(state["max_rows"] * cache.entry_bytes_estimate()),
            "operator_peak_bytes": int(state["max_rows"] * row_bytes),
            **rss.result(),
        }
        res.db = DbCounters.report(before, after, res.tuples)
        res.details = {
            "batches": state["batches"],
            "ttl_seconds": h.scale.ttl_s,
            "cache_hits": cache.hits,
            "cache_misses": cache.misses,
            "cache_expired": cache.expired,
            "cache_evictions": cache.evictions,
            "db_lookups": cache.db_keys,
            "hit_share": cache.hits / max(1, cache.hits + cache.misses + cache.expired),
        }
        res.correctness = h.check(table, res.tuples)
        res.staleness = h.stale_report(table, st, lru_stale)
        return res
