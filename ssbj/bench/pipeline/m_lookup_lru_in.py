"""``lookup_lru_in``: the same cache, the misses of a micro-batch batched in IN lists (not what Flink does)."""

from __future__ import annotations

from ssbj.bench.pipeline.lookup import LookupMethod

METHOD = LookupMethod("lookup_lru_in", "LRU+TTL lookup, misses batched in IN lists", batched_in=True)
