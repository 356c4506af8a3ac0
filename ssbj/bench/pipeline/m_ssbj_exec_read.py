"""``ssbj_exec_read``: the ssbj job sharded in the executors, each shard's task reading the batch's Kafka records."""

from __future__ import annotations

from ssbj.bench.pipeline.m_ssbj_exec import ExecutorMethod

METHOD = ExecutorMethod("ssbj_exec_read", "SSBJ in the executors (P shards, each reads the batch)", "read")
