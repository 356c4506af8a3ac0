"""Many binary enrichment jobs on shared scans, caches and stream rows (pure: Arrow in, Arrow out).

Jobs that read the same master table with the same key (and the same stream key type)
form a *scan group*: one :class:`~ssbj.core.operator.SemiStreamJoin` whose cyclic scan,
disk buffer and cache serve them all. Its H_S holds the union of the groups' waiting
stream tuples, each once, as (join key, row id): the cache inequality therefore counts
every waiting tuple of every job of the group, once. The stream rows themselves are
decoded once per stream and kept once in the :class:`~ssbj.shared.streamstore.StreamStore`,
with a bit set of the jobs (of that stream) whose filter they pass; a tuple enters a
group only if at least one of the group's jobs wants it.

Each step of a group yields (row id, master row) pairs and unmatched row ids; every job
gets the pairs of the rows whose bit it owns, its own stream and master projection
(names as :func:`ssbj.core.spec.master_output_names` gives them for the job alone), and
for a left join its unmatched rows NULL-padded: exactly the job's own batch join.

Multi-way jobs (later): a probe-order prefix shared by several jobs is one more kind of
group (docs/shared.md); the row-id/bit-set output split stays the same.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.costmodel import CostModel
from ssbj.core.master import MasterScan
from ssbj.core.operator import SemiStreamJoin
from ssbj.core.spec import StepResult, master_output_names
from ssbj.errors import CheckpointError, ConfigError, InputError
from ssbj.shared.groups import KEY, MASK, RID, Group, build_groups
from ssbj.shared.streamstore import StoredBatch, StreamStore

MAX_JOBS = 63  # one int64 bit set per stored row


@dataclass(frozen=True)
class SharedJobSpec:
    """One binary enrichment job: ``stream`` joined with ``master`` on the given keys."""

    name: str
    stream: str
    master: str
    stream_key: str
    master_key: str
    master_columns: tuple[str, ...] | None = None  # None: every master column
    stream_columns: tuple[str, ...] | None = None  # None: every stream column
    how: Literal["inner", "left"] = "inner"
    filter: pc.Expression | None = None  # stream rows the job reads (None: all)


@dataclass(frozen=True)
class MasterSource:
    """A master table: its scan and schema."""

    scan: MasterScan
    schema: pa.Schema


@dataclass
class JobCounts:
    """Per-job counters; ``tuples_in == matched + unmatched + waiting`` always holds."""

    tuples_in: int = 0
    output_rows: int = 0  # enriched rows (left-join NULL rows included)
    unmatched: int = 0
    waiting: int = 0
    matched: int = 0


@dataclass
class _Job:
    spec: SharedJobSpec
    stream_cols: list[str]
    master_cols: list[str]
    out_schema: pa.Schema
    stream_schema: pa.Schema
    bit: np.int64  # bit in the stream's MASK
    counts: JobCounts = field(default_factory=JobCounts)


class SharedJoin:
    """Binary enrichment jobs sharing scans, caches and stream rows; see the module doc."""

    def __init__(
        self,
        jobs: Iterable[SharedJobSpec],
        streams: dict[str, pa.Schema],
        masters: dict[str, MasterSource],
        *,
        algorithm: Literal["ssbj", "meshjoin"] = "ssbj",
        step_rows: int = 10_000,
        memory_budget: int | None = None,
        cost_model: CostModel | None = None,
        share_rows: Literal["auto", "always"] = "auto",
        groups: list[list[str]] | None = None,
        group_rows: list[int] | None = None,
        group_budgets: list[int | None] | None = None,
    ) -> None:
        self.share_rows = share_rows
        self.streams = streams
        self.masters = masters
        self.step_rows = step_rows
        self.algorithm = algorithm
        self.memory_budget = memory_budget
        self.cost_model = cost_model
        self.jobs: dict[str, _Job] = {}
        for spec in jobs:
            self._add_job(spec)
        # the columns each stream keeps: the union of its jobs' columns and keys
        self._keep: dict[str, list[str]] = {}
        for j in self.jobs.values():
            keep = self._keep.setdefault(j.spec.stream, [])
            for c in [*j.stream_cols, j.spec.stream_key]:
                if c not in keep:
                    keep.append(c)
        self.groups: list[Group] = build_groups(self, groups, group_rows, group_budgets)
        self._inline_streams = {g.streams[0] for g in self.groups if g.inline}
        self.store = StreamStore()
        self.read_seconds = 0.0  # spent reading master partitions (not checkpointed: a measurement)

    # ------------------------------------------------------------------ set-up
    def _add_job(self, spec: SharedJobSpec) -> None:
        if spec.name in self.jobs:
            raise ConfigError(f"two jobs are named {spec.name!r}")
        if spec.stream not in self.streams:
            raise ConfigError(f"job {spec.name!r}: unknown stream {spec.stream!r}")
        if spec.master not in self.masters:
            raise ConfigError(f"job {spec.name!r}: unknown master {spec.master!r}")
        s_schema, m_schema = self.streams[spec.stream], self.masters[spec.master].schema
        if spec.stream_key not in s_schema.names:
            raise InputError(f"job {spec.name!r}: stream key {spec.stream_key!r} not in {s_schema.names}")
        if spec.master_key not in m_schema.names:
            raise InputError(f"job {spec.name!r}: master key {spec.master_key!r} not in {m_schema.names}")
        scols = list(spec.stream_columns) if spec.stream_columns is not None else list(s_schema.names)
        mcols = list(spec.master_columns) if spec.master_columns is not None else list(m_schema.names)
        for c in scols:
            if c not in s_schema.names:
                raise InputError(f"job {spec.name!r}: stream column {c!r} not in {s_schema.names}")
        for c in mcols:
            if c not in m_schema.names:
                raise InputError(f"job {spec.name!r}: master column {c!r} not in {m_schema.names}")
        n = len(self.jobs)  # one bit per job over all streams: a row's bit set names its jobs alone
        if n >= MAX_JOBS:
            raise ConfigError(f"at most {MAX_JOBS} jobs share one application")
        stream_schema = pa.schema([s_schema.field(c) for c in scols])
        names = master_output_names(scols, mcols)
        out = pa.schema(
            list(stream_schema) + [pa.field(nm, m_schema.field(c).type) for nm, c in zip(names, mcols, strict=True)]
        )
        self.jobs[spec.name] = _Job(spec, scols, mcols, out, stream_schema, np.int64(1 << n))

    def output_schema(self, job: str) -> pa.Schema:
        """Return the schema of ``job``'s output: its stream columns, then its master columns."""
        return self.jobs[job].out_schema

    # ------------------------------------------------------------------ input
    def push(self, stream: str, batch: pa.Table | pa.RecordBatch) -> None:
        """Take decoded rows of ``stream``: stored once, their keys and row ids pushed to each scan group."""
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        if stream not in self._keep:
            if stream in self.streams:
                return  # no job reads it
            raise InputError(f"unknown stream {stream!r}")
        if table.num_rows == 0:
            return
        schema = self.streams[stream]
        try:
            table = table.select(schema.names).cast(schema)
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InputError(f"batch of stream {stream!r} does not match its schema: {exc}") from exc
        mask = np.zeros(table.num_rows, dtype=np.int64)
        for j in self.jobs.values():
            if j.spec.stream != stream:
                continue
            if j.spec.filter is None:
                sel = np.ones(table.num_rows, dtype=bool)
            else:
                got = pc.fill_null(_eval(table, j), False)
                sel = np.asarray(got.to_numpy(zero_copy_only=False), dtype=bool)
            mask[sel] |= j.bit
            j.counts.tuples_in += int(sel.sum())
        kept = table.select(self._keep[stream])
        if stream in self._inline_streams:
            start = self.store.reserve(table.num_rows)
        else:
            start = self.store.add(stream, kept.append_column(MASK, pa.array(mask, pa.int64())))
        rids = np.arange(start, start + table.num_rows, dtype=np.int64)
        for g in self.groups:
            gm = g.stream_masks.get(stream, 0)
            if not gm:
                continue
            key_col = next(self.jobs[n].spec.stream_key for n in g.jobs if self.jobs[n].spec.stream == stream)
            take = (mask & gm) != 0
            if not take.any():
                continue
            idx = np.flatnonzero(take)
            cols: dict[str, pa.Array | pa.ChunkedArray] = {
                KEY: table.column(key_col).take(idx).cast(g.key_type),
                RID: pa.array(rids[idx], pa.int64()),
            }
            if g.inline:
                cols[MASK] = pa.array(mask[idx], pa.int64())
                sub = kept.take(idx)
                for c in sub.column_names:
                    cols[c] = sub.column(c)
            g.op.push(pa.table(cols, schema=g.schema))
            g.pending.append(np.stack([rids[idx], mask[idx]]))
            g.pending_rows += len(idx)

    def _keep_key(self, stream: str) -> str:
        return next(j.spec.stream_key for j in self.jobs.values() if j.spec.stream == stream)

    # ------------------------------------------------------------------ steps
    def _busy(self, g: Group, drain: bool) -> bool:
        """Whether ``g`` steps now: it holds a full step (w of each of its streams), or anything with ``drain``.

        A group fed by two streams gets one stream's batch at a time; stepping on each
        batch alone would read a partition for half a step's tuples (the rest waits for
        the next batch or the drain).
        """
        op = g.op
        if drain:
            return bool(op.buffered_tuples or len(op.hs.queue))
        return op.buffered_tuples >= op.spec.max_step_tuples

    def step(self, drain: bool = False) -> dict[str, pa.Table]:
        """One step of every group holding a full step (with ``drain``: of every group with tuples).

        Returns each job's output rows of this step (jobs without rows are left out).
        """
        out: dict[str, list[pa.Table]] = {}
        for g in self.groups:
            if not self._busy(g, drain):
                continue
            before = g.op.buffered_tuples
            res: StepResult = g.op.step()
            self._consume_pending(g, before - g.op.buffered_tuples)
            g.rows_read += res.metrics.b
            g.served += res.metrics.w_n
            g.entered += res.metrics.w_s
            self.read_seconds += res.metrics.io_seconds
            self._split(g, res, out)
        self.store.drop_below(self._watermark())
        if self.store.batches:
            self.store.release(self._needed())
        return {k: pa.concat_tables(v) if len(v) > 1 else v[0] for k, v in out.items()}

    def pending(self, drain: bool = False) -> bool:
        """Whether some group holds a full step (with ``drain``: any buffered tuple or tuple in H_S)."""
        return any(self._busy(g, drain) for g in self.groups)

    def run(self, batches: Iterable[tuple[str, pa.Table]]) -> Iterator[dict[str, pa.Table]]:
        """Feed (stream, batch) pairs, stepping after each while a group holds a full step, then drain."""
        for stream, b in batches:
            self.push(stream, b)
            while self.pending():
                yield self.step()
        yield from self.drain()

    def drain(self) -> Iterator[dict[str, pa.Table]]:
        """Finish the R-cycle of every waiting tuple."""
        while self.pending(drain=True):
            yield self.step(drain=True)

    def _consume_pending(self, g: Group, n: int) -> None:
        g.pending_rows -= n
        while n > 0 and g.pending:
            head = g.pending[0]
            if head.shape[1] <= n:
                n -= head.shape[1]
                g.pending.popleft()
            else:
                g.pending[0] = head[:, n:]
                n = 0

    def _oldest(self, g: Group) -> int:
        """Oldest row id still waiting in ``g`` (H_S is in push order; then the stream buffer)."""
        hs = g.op.hs
        if hs.span > 0:
            return int(hs.take(np.array([hs.lo], dtype=np.int64)).column(RID)[0].as_py())
        if g.pending:
            return int(g.pending[0][0, 0])
        return self.store.next_rid

    def _needed(self) -> np.ndarray:
        """Row ids some group still waits for: in its H_S or not yet read from its stream buffer."""
        parts = []
        for g in self.groups:
            if g.inline:
                continue
            parts += [p[0] for p in g.pending]
            hs = g.op.hs
            if hs.span > 0:
                slots = np.arange(hs.lo, hs.hi, dtype=np.int64)
                live = slots[~hs.removed(slots)]
                if len(live):
                    parts.append(hs.take(live).column(RID).to_numpy())
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def _watermark(self) -> int:
        return min([self._oldest(g) for g in self.groups if not g.inline], default=self.store.next_rid)

    def _split(self, g: Group, res: StepResult, out: dict[str, list[pa.Table]]) -> None:
        enriched, unmatched = res.enriched, res.unmatched
        e_rids = enriched.column(RID).to_numpy() if enriched.num_rows else np.zeros(0, np.int64)
        u_rids = unmatched.column(RID).to_numpy() if unmatched.num_rows else np.zeros(0, np.int64)
        if g.inline:
            e_mask = enriched.column(MASK).to_numpy() if enriched.num_rows else np.zeros(0, np.int64)
            u_mask = unmatched.column(MASK).to_numpy() if unmatched.num_rows else np.zeros(0, np.int64)
        else:
            e_mask = self.store.masks(e_rids)
            u_mask = self.store.masks(u_rids)
        width = len(g.schema)  # the core names master columns after these (a clash gets _master)
        master_part = enriched.select(list(range(width, enriched.num_columns)))
        for name in g.jobs:
            j = self.jobs[name]
            parts: list[pa.Table] = []
            sel = np.flatnonzero((e_mask & j.bit) != 0)
            if len(sel):
                if g.inline:
                    srows = enriched.select(j.stream_cols).take(sel)
                    order = None
                else:
                    srows, order = self.store.take_grouped(e_rids[sel], j.stream_cols, j.stream_schema)
                mpart = master_part.take(sel if order is None else sel[order])
                mcols = [mpart.column(g.mcols.index(c)) for c in j.master_cols]
                parts.append(pa.Table.from_arrays(list(srows.columns) + mcols, schema=j.out_schema))
            usel = np.flatnonzero((u_mask & j.bit) != 0)
            j.counts.unmatched += len(usel)
            if len(usel) and j.spec.how == "left":
                if g.inline:
                    srows = unmatched.take(usel).select(j.stream_cols)
                else:
                    srows = self.store.take(u_rids[usel], j.stream_cols, j.stream_schema)
                nulls = [pa.nulls(len(usel), f.type) for f in j.out_schema][len(j.stream_cols) :]
                parts.append(pa.Table.from_arrays(list(srows.columns) + nulls, schema=j.out_schema))
            if parts:
                t = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
                j.counts.output_rows += t.num_rows
                out.setdefault(name, []).append(t)

    # ------------------------------------------------------------------ counts
    def _waiting_masks(self, g: Group) -> np.ndarray:
        hs = g.op.hs
        parts = [p[1] for p in g.pending]
        if hs.span > 0:
            slots = np.arange(hs.lo, hs.hi, dtype=np.int64)
            live = slots[~hs.removed(slots)]
            if len(live):
                rows = hs.take(live)
                parts.append(
                    rows.column(MASK).to_numpy() if g.inline else self.store.masks(rows.column(RID).to_numpy())
                )
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def counts(self) -> dict[str, JobCounts]:
        """Each job's counters, with its waiting and matched tuples counted now."""
        for g in self.groups:
            masks = self._waiting_masks(g)
            for name in g.jobs:
                j = self.jobs[name]
                c = j.counts
                c.waiting = int(((masks & j.bit) != 0).sum())
                c.matched = c.tuples_in - c.unmatched - c.waiting
        return {n: j.counts for n, j in self.jobs.items()}

    def memory(self) -> dict[str, int]:
        """Bytes held: each scan group's operator (its budgeted structures) and the stream store."""
        out = {f"group{i}:{g.master}.{g.master_key}": g.op.memory().total for i, g in enumerate(self.groups)}
        out["stream_store"] = self.store.nbytes()
        out["total"] = sum(out.values())
        return out

    def master_rows_read(self) -> int:
        """Master rows the groups' disk phases have read (one scan per group)."""
        return sum(g.rows_read for g in self.groups)

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(self, path: str | Path, checkpoint_id: int) -> None:
        """Save every group and the stored rows under ``checkpoint_id``; the top manifest commits it."""
        root = Path(path)
        for i, g in enumerate(self.groups):
            g.op.checkpoint(DirectoryStore(root / f"group-{i}"), checkpoint_id)
        top = DirectoryStore(root / "shared")
        files = []
        for b in self.store.batches:
            if not top.exists(b.name):
                top.write_table(b.name, b.table)
            files.append(b.name)
        pend = f"pending-{checkpoint_id}.npz"
        top.write_arrays(pend, {f"g{i}": _cat(g.pending) for i, g in enumerate(self.groups)})
        files.append(pend)
        top.write_manifest(
            checkpoint_id,
            {
                "files": files,
                "batches": [[b.start, b.stream, b.name, b.span] for b in self.store.batches],
                "next_rid": self.store.next_rid,
                "jobs": {n: j.counts.__dict__ for n, j in self.jobs.items()},
                "groups": [[g.master, g.master_key, g.jobs] for g in self.groups],
                "rows_read": [g.rows_read for g in self.groups],
            },
        )

    def restore(self, path: str | Path, checkpoint_id: int | None = None) -> int:
        """Return to the state of ``checkpoint_id`` (default: the newest committed); returns the id."""
        root = Path(path)
        top = DirectoryStore(root / "shared")
        cid, m = top.read_manifest(checkpoint_id)
        if m["groups"] != [[g.master, g.master_key, g.jobs] for g in self.groups]:
            raise CheckpointError(f"checkpoint {cid} in {root} was written for other jobs: {m['groups']}")
        store = StreamStore(int(m["next_rid"]))
        store.batches = [
            StoredBatch(int(row[0]), row[1], top.read_table(row[2]), int(row[3]) if len(row) > 3 else -1)
            for row in m["batches"]
        ]
        self.store = store
        pend = top.read_arrays(f"pending-{cid}.npz")
        for i, g in enumerate(self.groups):
            spec = g.op.spec
            g.op = SemiStreamJoin.restore(
                DirectoryStore(root / f"group-{i}"),
                spec,
                self.masters[g.master].scan,
                g.schema,
                self.masters[g.master].schema,
                cid,
                self.cost_model,
            )
            arr = pend[f"g{i}"]
            g.pending = deque([arr]) if arr.shape[1] else deque()
            g.pending_rows = int(arr.shape[1])
            g.rows_read = int(m["rows_read"][i])
        for n, c in m["jobs"].items():
            self.jobs[n].counts = JobCounts(**c)
        return cid


def _cat(parts: Iterable[np.ndarray]) -> np.ndarray:
    ps = list(parts)
    return np.concatenate(ps, axis=1) if ps else np.zeros((2, 0), np.int64)


def _eval(table: pa.Table, job: _Job) -> pa.ChunkedArray:
    """Boolean column: the rows ``job``'s filter keeps (NULL counts as not kept)."""
    import pyarrow.dataset as ds

    expr = job.spec.filter
    assert expr is not None  # noqa: S101
    return ds.dataset(table).to_table(columns={"k": expr}).column("k")
