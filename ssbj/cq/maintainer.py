"""A continuous query maintained under a sequence of inserts and deletes, micro-batch by micro-batch.

:class:`ContinuousQuery` applies a micro-batch of changes in ``_seq`` order across
relations, dead-letters what cannot be applied, and returns the batch's delta of the
answer.  Its whole state checkpoints to a directory and restores exactly.

Two engines keep the live tuples, with the same answers, deltas and dead letters:
``fast`` (:mod:`ssbj.cq.fastcore`, arrays and numba kernels, the default where it
applies) and ``reference`` (:mod:`ssbj.cq.refcore`: a tree of
:class:`ssbj.cq.engine.Node`, dicts of tuples, for what the fast one cannot encode:
assertion keys, non-integer keys).  ``engine="auto"`` picks
``fast`` when :func:`ssbj.cq.fastcore.fast_unsupported` finds nothing, else ``reference``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ssbj.core.checkpoint import DirectoryStore
from ssbj.cq import ckfile
from ssbj.cq.aggregate import GroupState
from ssbj.cq.changes import OP, POS, SEQ, DeadLetter, _row_json, validate
from ssbj.cq.fastcore import FastCore, fast_unsupported
from ssbj.cq.kernels import ABSENT, PRESENT, STALE
from ssbj.cq.query import QueryPlan
from ssbj.cq.refcore import RefCore
from ssbj.errors import CheckpointError, ConfigError

ENGINES = ("auto", "fast", "reference")
_REASONS = {
    STALE: "_seq repeats or is not after the last applied change",
    PRESENT: "insert of a primary key that is present",
    ABSENT: "delete of a tuple that is not present",
}


@dataclass
class BatchDelta:
    """The answer's change in one micro-batch: rows removed, rows added, and the batch's last ``_seq``."""

    removed: list[tuple[Any, ...]]
    added: list[tuple[Any, ...]]
    seq: int | None
    applied: int
    dead: list[DeadLetter]


def _dead(relation: str, table: pa.Table, i: int, code: int) -> DeadLetter:
    """Return the dead letter of row ``i`` of a relation's changes, refused for reason ``code``."""
    return DeadLetter(
        relation,
        table.column(SEQ)[i].as_py(),
        int(table.column(POS)[i].as_py()),
        _REASONS[code],
        _row_json(table.drop_columns([POS]), i),
    )


def slot_layout(plan: QueryPlan) -> list[int]:
    """Return the slots a join result carries, in order: each alias's own, then its children's subtrees."""
    out: list[int] = []

    def walk(alias: str) -> None:
        out.extend(plan.aliases[alias].slots)
        for c in plan.aliases[alias].children:
            walk(c)

    walk(plan.root)
    return out


class ContinuousQuery:
    """The live-tuple state of one query, its answer, and its dead letters."""

    def __init__(self, plan: QueryPlan, engine: str = "auto") -> None:
        if engine not in ENGINES:
            raise ConfigError(f"continuous query: engine {engine!r} is not one of {list(ENGINES)}")
        why = fast_unsupported(plan)
        if engine == "fast" and why is not None:
            raise ConfigError(f"continuous query: the fast engine cannot run this query: {why}")
        self.engine = "fast" if engine != "reference" and why is None else "reference"
        self.plan = plan
        layout = slot_layout(plan)
        self.groups = GroupState(plan)
        self.groups.layout = layout
        self.fast = FastCore(plan, layout) if self.engine == "fast" else None
        self.ref = RefCore(plan) if self.fast is None else None
        self._relations = frozenset(plan.relations())
        self.last_seq: int | None = None
        self.applied = 0
        self.join_rows = 0  # join results that entered or left ΔQ (the array engine's work counter, not state)
        self.dead_letters: list[DeadLetter] = []
        # the checkpoint chain the state is at: (full checkpoint's token, increments on top), None: not known
        self.chain: tuple[str, int] | None = None
        self._pending: tuple[str, int] | None = None

    # -- one micro-batch
    def apply(self, batch: dict[str, pa.Table]) -> BatchDelta:
        """Apply one micro-batch (rows with ``_op``/``_seq``, any relations, any order); its delta."""
        plan = self.plan
        dead: list[DeadLetter] = []
        names: list[str] = []
        raw: list[pa.Table] = []
        seqs, rel_ix, row_ix = [], [], []
        for relation, table in batch.items():
            if relation not in plan.tables or relation not in self._relations:
                continue  # a relation the query does not read
            if POS not in table.column_names:
                table = table.append_column(POS, pa.array(np.arange(table.num_rows, dtype=np.int64)))
            valid, bad = validate(table, plan.tables[relation], relation)
            dead.extend(bad)
            rel_ix.append(np.full(valid.num_rows, len(names), dtype=np.int32))
            names.append(relation)
            raw.append(valid)
            seqs.append(valid.column(SEQ).to_numpy())
            row_ix.append(np.arange(valid.num_rows, dtype=np.int64))
        removed: list[tuple[Any, ...]] = []
        added: list[tuple[Any, ...]] = []
        if seqs:
            all_seq = np.concatenate(seqs)
            order = np.argsort(all_seq, kind="stable")
            sorted_seq = all_seq[order]
            rels = np.concatenate(rel_ix)[order]
            rows = np.concatenate(row_ix)[order]
            stale = np.zeros(len(order), dtype=bool)
            if len(order):
                repeat = sorted_seq[1:] == sorted_seq[:-1]
                stale[1:] |= repeat  # all changes sharing a _seq: none of them is known to come first
                stale[:-1] |= repeat
                if self.last_seq is not None:
                    stale |= sorted_seq <= self.last_seq
            if self.fast is not None:
                removed, added = self._apply_fast(names, raw, rels, rows, stale, dead)
            else:
                removed, added = self._apply_reference(names, raw, rels, rows, stale, dead)
            good = sorted_seq[~stale]
            if len(good):
                self.last_seq = int(good[-1])
        self.dead_letters.extend(dead)
        return BatchDelta(removed, added, self.last_seq, self.applied, dead)

    def _apply_fast(
        self,
        names: list[str],
        raw: list[pa.Table],
        rels: np.ndarray,
        rows: np.ndarray,
        stale: np.ndarray,
        dead: list[DeadLetter],
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """Apply sorted changes with the array engine; return the answer's (removed, added) rows."""
        fast = self.fast
        assert fast is not None  # noqa: S101
        prepared = [fast.prepare(name, table) for name, table in zip(names, raw, strict=True)]
        status, slots, plus = fast.run(prepared, names, rels, rows, stale)
        bad = np.flatnonzero(status)
        for k in bad.tolist():
            r = int(rels[k])
            dead.append(_dead(names[r], raw[r], int(rows[k]), int(status[k])))
        self.applied += len(status) - len(bad)
        self.join_rows += len(plus)
        return self.groups.apply_slots(slots, plus)

    def _apply_reference(
        self,
        names: list[str],
        raw: list[pa.Table],
        rels_a: np.ndarray,
        rows_a: np.ndarray,
        stale: np.ndarray,
        dead: list[DeadLetter],
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """Apply sorted changes with the dict engine, one by one."""

        def reject(r: int, i: int, code: int) -> None:
            dead.append(_dead(names[r], raw[r], i, code))

        applied, plus, minus = self._ref().apply(names, raw, rels_a, rows_a, stale, reject)
        self.applied += applied
        removed, added = self.groups.apply(plus, minus)
        plus.clear()
        minus.clear()
        return removed, added

    def _ref(self) -> RefCore:
        assert self.ref is not None  # noqa: S101  (the dict engine runs where the array one does not)
        return self.ref

    # -- the answer
    def result(self) -> pa.Table:
        """Return the query's answer now."""
        return self.groups.table()

    def delta_table(self, delta: BatchDelta) -> pa.Table:
        """Return a batch's delta as rows with ``_op`` (``-`` first, then ``+``) and ``_seq``."""
        schema = self.groups.output_schema()
        rows = delta.removed + delta.added
        ops = ["-"] * len(delta.removed) + ["+"] * len(delta.added)
        cols = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
        data = {f.name: pa.array(list(c), f.type) for f, c in zip(schema, cols, strict=True)}
        data[OP] = pa.array(ops, pa.string())
        data[SEQ] = pa.array([delta.seq] * len(rows), pa.int64())
        return pa.table(data)

    def upserts(self, delta: BatchDelta) -> tuple[pa.Table, pa.Table]:
        """Turn a batch's delta into idempotent warehouse writes: rows to upsert, group keys to delete.

        The key is the output's group-by columns; a changed group that still exists is
        upserted with its new row, one that vanished is deleted by key.  Applying the same
        writes twice leaves the table as once (a retried micro-batch is harmless).  A query
        without GROUP BY and aggregates has no key: its answer is a multiset, kept by deltas.
        """
        plan = self.plan
        if not plan.grouped:
            raise ConfigError("continuous query: upserts need a GROUP BY or an aggregate (the rows have no key)")
        key_cols = [o.name for o in plan.outputs if o.key is not None]
        added = self.delta_table(BatchDelta([], delta.added, delta.seq, delta.applied, []))
        gone = self.delta_table(BatchDelta(delta.removed, [], delta.seq, delta.applied, []))
        new_keys = {tuple(r[c] for c in key_cols) for r in added.select(key_cols).to_pylist()}
        keep = [tuple(r[c] for c in key_cols) not in new_keys for r in gone.select(key_cols).to_pylist()]
        deletes = (
            gone.filter(pa.array(keep, pa.bool_())).select([*key_cols, SEQ])
            if gone.num_rows
            else gone.select([*key_cols, SEQ])
        )
        return added.drop_columns([OP]), deletes

    def state(self) -> dict[str, Any]:
        """Everything the answer and future changes depend on (compared exactly in tests)."""
        core = self.fast.state() if self.fast is not None else self._ref().state()
        return {
            "engine": self.engine,
            **core,
            "groups": self.groups.groups,
            "last_seq": self.last_seq,
            "applied": self.applied,
        }

    def nbytes(self) -> int:
        """Size of the state in bytes.

        The fast engine's arrays as allocated, Python objects one by one (``sys.getsizeof``, shared objects once).
        """
        import sys

        seen: set[int] = set()
        total = 0
        stack: list[Any] = [self.state() if self.fast is None else self.groups.groups]
        if self.fast is not None:
            total += self.fast.nbytes()
        while stack:
            o = stack.pop()
            if id(o) in seen:
                continue
            seen.add(id(o))
            total += sys.getsizeof(o)
            if isinstance(o, dict):
                stack.extend(o.keys())
                stack.extend(o.values())
            elif isinstance(o, (list, tuple, set, frozenset)):
                stack.extend(o)
        return total

    # -- checkpoints
    def state_bytes(self) -> bytes:
        """Return the whole state, serialised and compressed (a full checkpoint's data file).

        Pure: :meth:`checkpoint_committed` makes it the base later increments build on.
        """
        token = uuid.uuid4().hex
        data: dict[str, Any] = {
            "kind": "full",
            "fingerprint": self.plan.fingerprint,
            "engine": self.engine,
            "dead": len(self.dead_letters),
            "chain": (token, 0),
            "groups": self.groups.groups,
            "last_seq": self.last_seq,
            "applied": self.applied,
        }
        if self.fast is not None:  # the arrays go in as raw buffers, cut to their used part
            data.update(arrays=self.fast.base_arrays(), dicts=self.fast.dicts)
        else:
            data["state"] = self.state()
        self._pending = (token, 0)
        return ckfile.pack(data)

    def can_increment(self) -> bool:
        """Whether :meth:`increment_bytes` can write on top of the last committed checkpoint."""
        return self.fast is not None and self.chain is not None

    def increment_bytes(self) -> bytes:
        """Return what changed since the last committed checkpoint (dirty hash rows and tuple slots, the groups).

        Restored by :meth:`apply_increment_bytes` on top of that checkpoint; pure until
        :meth:`checkpoint_committed`.  The array engine only (the dict engine logs changes).
        """
        if self.fast is None or self.chain is None:
            raise ConfigError("continuous query: an increment needs the array engine and a committed checkpoint")
        token, step = self.chain
        data = {
            "kind": "increment",
            "fingerprint": self.plan.fingerprint,
            "engine": self.engine,
            "chain": (token, step + 1),
            "arrays": self.fast.increment_arrays(),
            "dicts": self.fast.dicts,
            "groups": self.groups.groups,
            "last_seq": self.last_seq,
            "applied": self.applied,
        }
        self._pending = (token, step + 1)
        return ckfile.pack(data)

    def dirty_fraction(self) -> float:
        """Share of the state an increment would write now (1.0 for the dict engine: it has none)."""
        return 1.0 if self.fast is None else self.fast.dirty_fraction()

    def checkpoint_committed(self) -> None:
        """Build on the bytes :meth:`state_bytes`/:meth:`increment_bytes` returned last: they are stored."""
        self.chain, self._pending = self._pending, None
        if self.fast is not None:
            self.fast.clear_dirty()

    @classmethod
    def from_state_bytes(cls, plan: QueryPlan, blob: bytes, where: str) -> ContinuousQuery:
        """Rebuild a query from :meth:`state_bytes` of the same query and schema (``where`` names it in errors).

        Formats 1 and 2 (uncompressed pickles of earlier versions) are read too.
        """
        data = ckfile.unpack(blob, where)
        if data.get("kind", "full") != "full":
            raise CheckpointError(f"{where} is an increment, not a full checkpoint")
        if data.get("fingerprint") != plan.fingerprint:
            raise CheckpointError(f"{where} belongs to another query or schema")
        cq = cls(plan, engine=data.get("engine", "reference"))
        chain = data.get("chain")
        cq.chain = None if chain is None else (str(chain[0]), int(chain[1]))
        if "arrays" in data:
            if cq.fast is None:  # pragma: no cover - the plan decides the engine, as when it was written
                raise CheckpointError(f"{where} holds the array engine's state; this plan runs the dict engine")
            cq.fast.load_arrays(data["arrays"], data["dicts"])
            cq.groups.groups = data["groups"]
            cq.last_seq = data["last_seq"]
            cq.applied = data["applied"]
            return cq
        st = data["state"]
        cq._ref().load(st)
        cq.groups.groups = st["groups"]
        cq.last_seq = st["last_seq"]
        cq.applied = st["applied"]
        return cq

    def apply_increment_bytes(self, blob: bytes, where: str) -> None:
        """Bring the state forward by :meth:`increment_bytes`, written right after the checkpoint it is at."""
        data = ckfile.unpack(blob, where)
        if data.get("kind") != "increment" or data.get("fingerprint") != self.plan.fingerprint:
            raise CheckpointError(f"{where} is not an increment of this query")
        token, step = data["chain"]
        if self.fast is None or self.chain != (token, step - 1):
            raise CheckpointError(f"{where} is increment {step} of chain {token}; the state is at {self.chain}")
        self.fast.apply_increment(data["arrays"], data["dicts"], where)
        self.groups.groups = data["groups"]
        self.last_seq = data["last_seq"]
        self.applied = data["applied"]
        self.chain = (token, step)

    def checkpoint(
        self,
        path: str | Path | DirectoryStore,
        checkpoint_id: int,
        position: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Write the state as checkpoint ``checkpoint_id`` under ``path`` (atomic; older ones collected).

        ``extra`` goes into the manifest.
        """
        store = path if isinstance(path, DirectoryStore) else DirectoryStore(path)
        name = f"cq-{checkpoint_id}.pickle"
        store.write(name, self.state_bytes())
        store.write_manifest(
            checkpoint_id,
            {
                "files": [name],
                "fingerprint": self.plan.fingerprint,
                "last_seq": self.last_seq,
                "applied": self.applied,
                "position": position,
                **(extra or {}),
            },
        )
        self.checkpoint_committed()

    @classmethod
    def restore(
        cls, plan: QueryPlan, path: str | Path, checkpoint_id: int | None = None
    ) -> tuple[ContinuousQuery, dict[str, Any]]:
        """Restore a checkpoint this class wrote for the same query and schema; also returns its manifest."""
        store = DirectoryStore(path)
        cid, manifest = store.read_manifest(checkpoint_id)
        if manifest.get("fingerprint") != plan.fingerprint:
            raise CheckpointError(f"checkpoint {cid} in {path} belongs to another query or schema")
        return cls.from_state_bytes(plan, store.read(manifest["files"][0]), f"checkpoint {cid}"), manifest
