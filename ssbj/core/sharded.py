"""P shard operators in one process: each a full :class:`SemiStreamJoin` over its share of R.

This is the sharded join without an engine around it: stream batches are split by the
router, each shard steps its own operator over its own share (its budget is the total
divided by P), and checkpoints go to one directory per shard (``shard-<s>``). The Spark
hostings (:mod:`ssbj.pipeline.shardhost`) run the same per-shard code in executors; this
class is what their output is compared with, and what the exactness tests drive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.keys import key_family
from ssbj.core.master import ArrowMaster
from ssbj.core.operator import JoinSpec, SemiStreamJoin, StepResult
from ssbj.core.shards import Router, ShardedArrowMaster, split


def shard_spec(spec: JoinSpec, shards: int) -> JoinSpec:
    """Return the spec of one of ``shards`` shards: budget and step bytes divided by P."""
    budget = None if spec.memory_budget is None else max(1, spec.memory_budget // shards)
    return dataclasses.replace(spec, memory_budget=budget, chunk_bytes=max(1, spec.chunk_bytes // shards))


def shard_store(root: str | Path, shard: int) -> DirectoryStore:
    """Return the checkpoint directory of ``shard`` under ``root``."""
    return DirectoryStore(Path(root) / f"shard-{shard}")


class ShardedJoin:
    """P operators, one per shard of ``router``, each over its share of ``master``."""

    def __init__(
        self,
        spec: JoinSpec,
        master: ArrowMaster,
        stream_schema: pa.Schema,
        router: Router,
        partition_rows: int | None = None,
        operators: list[SemiStreamJoin] | None = None,
    ) -> None:
        self.spec = spec
        self.router = router
        self.stream_schema = stream_schema
        self.family = key_family(stream_schema.field(spec.stream_key).type)
        router.check_family(self.family)
        self.shard_spec = shard_spec(spec, router.shards)
        self.masters = [
            ShardedArrowMaster(master, spec.master_key, s, router, partition_rows) for s in range(router.shards)
        ]
        self.operators = operators or [
            SemiStreamJoin(self.shard_spec, m, stream_schema, m.schema) for m in self.masters
        ]

    @property
    def shards(self) -> int:
        """P."""
        return self.router.shards

    def push(self, batch: pa.Table | pa.RecordBatch) -> None:
        """Route ``batch``'s rows to their shards' stream buffers."""
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        for op, part in zip(self.operators, split(table, self.spec.stream_key, self.family, self.router), strict=True):
            op.push(part)

    def process(self) -> list[StepResult]:
        """Run one micro-batch per shard: step while tuples are buffered, at least once while any wait."""
        return [r for op in self.operators for r in process_shard(op)]

    def drain(self) -> Iterator[StepResult]:
        """Finish every waiting tuple of every shard."""
        for op in self.operators:
            yield from op.drain()

    def checkpoint(self, root: str | Path, checkpoint_id: int) -> None:
        """Checkpoint every shard under ``root/shard-<s>``."""
        for s, op in enumerate(self.operators):
            op.checkpoint(shard_store(root, s), checkpoint_id)

    @classmethod
    def restore(
        cls,
        root: str | Path,
        spec: JoinSpec,
        master: ArrowMaster,
        stream_schema: pa.Schema,
        router: Router,
        partition_rows: int | None = None,
        checkpoint_id: int | None = None,
    ) -> ShardedJoin:
        """Every shard restored from its own checkpoint directory."""
        fresh = cls(spec, master, stream_schema, router, partition_rows)
        ops = [
            SemiStreamJoin.restore(shard_store(root, s), fresh.shard_spec, m, stream_schema, m.schema, checkpoint_id)
            for s, m in enumerate(fresh.masters)
        ]
        return cls(spec, master, stream_schema, router, partition_rows, ops)


def process_shard(op: SemiStreamJoin) -> list[StepResult]:
    """One micro-batch of one shard, as the driver-side processor does it (ssbj/pipeline/processor.py)."""
    results = []
    while op.buffered_tuples:
        results.append(op.step())
    if not results and op.waiting_tuples:
        results.append(op.step())  # keep the R-cycle moving for tuples already waiting
    return results
