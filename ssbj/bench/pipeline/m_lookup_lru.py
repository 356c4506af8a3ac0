"""``lookup_lru``: Flink-style lookup join, LRU+TTL cache and one point query per miss."""

from __future__ import annotations

from ssbj.bench.pipeline.lookup import LookupMethod

METHOD = LookupMethod("lookup_lru", "LRU+TTL lookup, 1 point query per miss (Flink-style)", batched_in=False)
