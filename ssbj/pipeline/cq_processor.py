"""A continuous query one micro-batch at a time: decode, apply, write idempotently, checkpoint; no Spark here.

Exactly once, by the same three rules as :mod:`ssbj.pipeline.processor`:

1. every write of batch N is idempotent: the deltas and dead letters replace what an
   earlier attempt of N wrote (the sinks key them by batch id), the result table gets
   absolute rows of the changed groups (upserts and deletes by group key), never increments;
2. the engine's state is checkpointed after the writes, under the batch id, with the
   counters and the next ``_seq`` in its manifest;  the whole state is written every
   ``full_every`` batches, the batches between as increments: with the array engine the
   hash rows and tuple slots the batch wrote (patched onto the base on restore, zstd
   compressed like the base; a batch that dirtied more than half the state writes it
   whole), with the dict engine its change rows (a log re-applied on restore: the
   engine is deterministic, so the same changes rebuild the same state);
3. a batch whose id is not newer than the last checkpoint is a replay: the state rolls
   back to the checkpoint before it and the batch is processed again; it then computes
   the same delta (the same records get the same ``_seq``) and writes the same rows.

A batch that starts from no state at all (the first one, or a replay of it) rewrites the
whole result table, so rows a lost state left there cannot survive; when the job has a
snapshot, that batch first inserts the snapshot's rows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from ssbj.adapters.result_table import ResultTarget
from ssbj.contracts import DEAD_LETTER_SCHEMA, WarehouseSink
from ssbj.core.checkpoint import DirectoryStore
from ssbj.cq.changes import OP, SEQ
from ssbj.cq.maintainer import ContinuousQuery
from ssbj.cq.query import QueryPlan
from ssbj.errors import CheckpointError
from ssbj.logs import fields
from ssbj.pipeline import faults
from ssbj.pipeline.cq_records import DecodedChanges
from ssbj.pipeline.replay import rollback_before

log = logging.getLogger("ssbj.cq")

Decoder = Callable[[DecodedChanges], None]
"""Decode a batch's raw records into the given :class:`DecodedChanges` (its ``next_seq`` set)."""


@dataclass
class CqTotals:
    """Counters over the job's life; restored from the checkpoint."""

    batches: int = 0
    records_in: int = 0
    tombstones: int = 0
    changes: int = 0  # change rows decoded and fitting the schema (an update is two)
    applied: int = 0
    refused: int = 0  # changes the engine dead-lettered (a delete of a missing key, ...)
    undecodable: int = 0  # records or change rows dead-lettered before the engine
    dead_letters: int = 0  # rows written to the dead-letter sink
    delta_rows: int = 0
    next_seq: int = 0

    @property
    def reconciled(self) -> bool:
        """Every decoded change was applied or refused, and every dead letter was stored."""
        return self.changes == self.applied + self.refused and self.dead_letters == self.undecodable + self.refused


class CqProcessor:
    """Maintains one continuous query over micro-batches, with idempotent warehouse writes."""

    def __init__(
        self,
        plan: QueryPlan,
        store: DirectoryStore,
        dead_letters: WarehouseSink,
        result: ResultTarget | None = None,
        deltas: WarehouseSink | None = None,
        snapshot: Decoder | None = None,
        full_every: int = 20,
        max_increment: float = 0.5,
    ) -> None:
        self.plan = plan
        self.store = store
        self.dead_sink = dead_letters
        self.result = result
        self.deltas = deltas
        self.snapshot = snapshot
        self.full_every = max(1, full_every)
        self.max_increment = max_increment  # an increment over this share of the state is written whole instead
        self.base: str | None = None  # the newest checkpoint's full-state file
        self.log: list[list[Any]] = []  # per batch since: [id, {relation: file}] or [id, {"state": f}, "state"]
        self.lock = threading.RLock()
        self.cq: ContinuousQuery | None = None
        self.last_batch: int | None = None
        self.totals = CqTotals()
        self.last_progress: dict[str, Any] = {}
        self._prepared = False

    @property
    def key(self) -> list[str]:
        """The result's key: the output's group-by columns."""
        return [o.name for o in self.plan.outputs if o.key is not None]

    # ------------------------------------------------------------------ state
    def open(self) -> None:
        """Restore the newest checkpoint, or start from no state."""
        with self.lock:
            latest = self.store.latest()
            if latest is None:
                self._fresh()
            else:
                self._restore(latest)
            if not self._prepared:
                assert self.cq is not None  # noqa: S101
                answer = self.cq.groups.output_schema()
                self.dead_sink.prepare(DEAD_LETTER_SCHEMA)
                if self.deltas is not None:
                    self.deltas.prepare(answer.append(pa.field(OP, pa.string())).append(pa.field(SEQ, pa.int64())))
                if self.result is not None:
                    self.result.prepare(answer, self.key)
                self._prepared = True

    def _fresh(self) -> None:
        self.cq = ContinuousQuery(self.plan)
        self.last_batch = None
        self.totals = CqTotals()
        self.base, self.log = None, []

    def _restore(self, checkpoint_id: int) -> None:
        cid, manifest = self.store.read_manifest(checkpoint_id)
        if manifest.get("fingerprint") != self.plan.fingerprint:
            raise CheckpointError(f"checkpoint {cid} in {self.store.path} belongs to another query or schema")
        base = str(manifest["base"])
        cq = ContinuousQuery.from_state_bytes(self.plan, self.store.read(base), f"checkpoint {cid}")
        for entry in manifest["log"]:  # [batch id, files] (changes) or [batch id, {"state": file}, "state"]
            files = entry[1]
            if len(entry) > 2 and entry[2] == "state":
                cq.apply_increment_bytes(self.store.read(files["state"]), f"checkpoint {cid}: {files['state']}")
            else:
                cq.apply({relation: self.store.read_table(f) for relation, f in files.items()})
        if any(len(entry) <= 2 for entry in manifest["log"]):
            cq.chain = None  # changes re-applied: the arrays are not a committed checkpoint's, the next one is full
        cq.dead_letters.clear()
        self.cq = cq
        self.base, self.log = base, manifest["log"]
        self.last_batch = int(manifest["batch_id"])
        self.totals = CqTotals(**manifest["totals"])

    def _checkpoint(self, batch_id: int, changes: dict[str, pa.Table]) -> None:
        """Write the whole state every ``full_every`` batches, else this batch's increment on top of the last one."""
        cq = self.cq
        assert cq is not None  # noqa: S101
        store = faults.store_for(self.store, batch_id)
        if (
            self.base is None
            or len(self.log) + 1 >= self.full_every
            or (cq.fast is not None and (not cq.can_increment() or cq.dirty_fraction() > self.max_increment))
        ):
            base, log = f"cq-{batch_id}.pickle", []
            store.write(base, cq.state_bytes())
        elif cq.can_increment():
            name = f"inc-{batch_id}.cq"
            store.write(name, cq.increment_bytes())
            base, log = self.base, [*self.log, [batch_id, {"state": name}, "state"]]
        else:
            files = {}
            for relation, table in changes.items():
                files[relation] = f"log-{batch_id}-{relation}.arrow"
                store.write_table(files[relation], table)
            base, log = self.base, [*self.log, [batch_id, files]]
        manifest = {
            "files": [base, *(f for entry in log for f in entry[1].values())],
            "base": base,
            "log": log,
            "fingerprint": self.plan.fingerprint,
            "batch_id": batch_id,
            "totals": asdict(self.totals),
            "result_rows": len(cq.groups.groups),
        }
        store.write_manifest(batch_id, manifest)
        cq.checkpoint_committed()
        self.base, self.log = base, log

    def _rollback_before(self, batch_id: int) -> None:
        rollback_before(self.store, batch_id, self._restore, self._fresh, log)

    def reset(self) -> None:
        """Forget the in-memory state: the next batch reloads the newest checkpoint (after a failed batch)."""
        with self.lock:
            self.cq = None

    # ------------------------------------------------------------------ batches
    def process(self, batch_id: int, decode: Decoder) -> dict[str, Any]:
        """Process micro-batch ``batch_id``, whose raw records ``decode`` turns into changes."""
        with self.lock:
            t0 = time.perf_counter()
            if self.cq is None:
                self.open()
            if self.last_batch is not None and batch_id <= self.last_batch:
                self._rollback_before(batch_id)
            cq = self.cq
            assert cq is not None  # noqa: S101
            full = self.last_batch is None  # from no state: the whole answer is written
            decoded = DecodedChanges(next_seq=self.totals.next_seq)
            if full and self.snapshot is not None:
                self.snapshot(decoded)
            decode(decoded)
            faults.crash_point("after-decode", batch_id)
            t1 = time.perf_counter()
            applied_before = cq.applied
            undecodable = len(decoded.dead)
            delta = cq.apply(decoded.changes)
            for d in delta.dead:
                decoded.dead_letter(d)
            cq.dead_letters.clear()  # kept in the dead-letter sink, not in memory
            t2 = time.perf_counter()
            delta_table = cq.delta_table(delta)
            if self.deltas is not None:
                self.deltas.write(batch_id, 0, delta_table)
            if self.result is not None:
                upserts, deletes = cq.upserts(delta)
                self.result.write(upserts.drop_columns([SEQ]), deletes, cq.result, full)
            dead = decoded.dead_table()
            self.dead_sink.write(batch_id, 0, dead)
            faults.crash_point("after-sink", batch_id)
            t3 = time.perf_counter()
            t = self.totals
            t.batches += 1
            t.records_in += decoded.records
            t.tombstones += decoded.skipped
            t.changes += decoded.changed_rows()
            t.applied += cq.applied - applied_before
            t.refused += len(delta.dead)
            t.undecodable += undecodable
            t.dead_letters += dead.num_rows
            t.delta_rows += delta_table.num_rows
            t.next_seq = decoded.next_seq
            self._checkpoint(batch_id, decoded.changes)
            self.last_batch = batch_id
            faults.crash_point("after-checkpoint", batch_id)
            t4 = time.perf_counter()
            progress = {
                "event": "batch",
                "batch_id": batch_id,
                "records_in": decoded.records,
                "changes": decoded.changed_rows(),
                "applied": cq.applied - applied_before,
                "dead_letters": dead.num_rows,
                "delta_rows": delta_table.num_rows,
                "result_rows": len(cq.groups.groups),
                "full_write": full,
                "seconds": {"decode": t1 - t0, "apply": t2 - t1, "write": t3 - t2, "checkpoint": t4 - t3},
                "totals": {**asdict(t), "reconciled": t.reconciled},
            }
            self.last_progress = progress
            log.info(
                "batch %d: %d records, %d changes applied, %d dead letters, %d delta rows",
                batch_id,
                decoded.records,
                progress["applied"],
                dead.num_rows,
                delta_table.num_rows,
                extra=fields(**progress),
            )
            return progress

    def close(self) -> None:
        """Release the sinks' connections."""
        for s in (self.result, self.deltas, self.dead_sink):
            close = getattr(s, "close", None)
            if callable(close):
                close()
