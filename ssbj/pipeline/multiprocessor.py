"""Several enrichment jobs on one shared operator, one micro-batch at a time; no Spark here.

Each source is read by its own streaming query, so a call is (source, Spark batch id).
The shared state is checkpointed under the application's own *checkpoint id*, one per
call, increasing over all sources; each job's sink writes under (checkpoint id, 0). The
checkpoint's meta holds, per source, the last Spark batch id whose records it contains:

1. a call whose Spark batch id equals that one is a replay of a batch already in the
   state (Spark had not committed it when the process died): its output is in the sinks
   and its tuples in the state, so it is skipped;
2. any other call first restores the newest checkpoint (after a crash: the state before
   the call that died), takes the next checkpoint id, writes every live job's sinks under
   it (replacing what a crashed attempt wrote there; an empty write deletes), and then
   commits the state under that id.

Jobs are read at start. When the list differs from the checkpoint's current epoch, a new
epoch starts before the first batch (:class:`~ssbj.shared.epochs.EpochedSharedJoin`):
new tuples go to the new job set while the old epoch finishes its waiting tuples beside
it, writing the removed jobs' last rows to their own sinks. Their job files are kept in
the checkpoint until their epoch has drained, so a removed job needs no file.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.config import JobConfig
from ssbj.contracts import DEAD_LETTER_SCHEMA, RunCounts, WarehouseSink
from ssbj.core.costmodel import CostModel
from ssbj.credentials import engine
from ssbj.errors import ConfigError, StateError
from ssbj.logs import fields
from ssbj.pipeline import faults, multiconf
from ssbj.pipeline.factory import MasterSource, build_sink, check_key_types
from ssbj.pipeline.multiconf import JobSet
from ssbj.pipeline.multidecode import HAS, SharedDecoded, flag_keys, shared_decoder, with_flags
from ssbj.pipeline.multiplan import PlanKeeper, epoch_options
from ssbj.pipeline.shared_plan import partition_rows_for, plan_for
from ssbj.shared.epochs import EpochedSharedJoin
from ssbj.shared.operator import MasterSource as SharedMaster
from ssbj.shared.operator import SharedJobSpec
from ssbj.shared.runplan import Assumed, RunPlan

log = logging.getLogger("ssbj.progress")


@dataclass
class JobTotals:
    """Per-job counters the operator does not keep: records read, dead letters, rows written."""

    records_in: int = 0
    dead_letters: int = 0
    output_rows: int = 0


class MultiProcessor:
    """Drives the shared operator for a :class:`JobSet`; see the module doc."""

    def __init__(
        self,
        jobs: JobSet,
        root: str | Path,
        cost_model: CostModel | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.jobs = jobs
        self.root = Path(root)
        self.state_dir = self.root / "state"
        self.cost_model = cost_model or CostModel()
        self.lock = threading.RLock()
        self.esj: EpochedSharedJoin | None = None
        self.known: dict[str, JobConfig] = {}  # jobs of every live epoch
        self.sinks: dict[str, tuple[WarehouseSink, WarehouseSink]] = {}
        self.totals: dict[str, JobTotals] = {}
        self.done: dict[str, int] = {}  # source id -> last Spark batch id in the state
        self.layouts: dict[str, dict[str, Any]] = {}
        self.partition_rows: dict[str, int] = {}
        self.last_id: int | None = None
        self.last_progress: dict[str, Any] = {}
        self.switched = False  # whether this start began a new epoch
        self._streams: dict[str, pa.Schema] = {}
        self._masters: dict[str, SharedMaster] = {}
        self._master_cols: dict[str, list[str] | None] = {}
        self._schemas: dict[str, pa.Schema] = {}  # each live job's output schema
        self._decoders: dict[str, Callable[[pa.Table], SharedDecoded]] = {}
        self._last_end = time.time()
        self.planner = PlanKeeper(clock)
        self._infos: dict[str, tuple[int, Any]] = {}  # master id -> (rows, schema): one COUNT per master

    # ------------------------------------------------------------------ state
    def open(self) -> None:
        """Restore the newest checkpoint (or start fresh), then switch to the configured jobs if they differ."""
        with self.lock:
            found = EpochedSharedJoin.checkpoint_meta(self.state_dir)
            if found is None:
                self._fresh()
            else:
                self._restore(found[0], found[1])
            self._switch_if_changed()
            for sid, names in self.jobs.sources.items():
                self._decoders[sid] = shared_decoder(self.jobs.jobs[names[0]], self.jobs.keys(sid))

    def _fresh(self) -> None:
        self.known = dict(self.jobs.jobs)
        self.totals = {n: JobTotals() for n in self.known}
        self.done, self.layouts, self.partition_rows, self.last_id = {}, {}, {}, None
        self._streams.clear()
        self._masters.clear()
        self._master_cols.clear()
        self._add_inputs(self.known)
        plan = self._make_plan(self.known, None)
        self.esj = EpochedSharedJoin(self._specs(self.known), self._streams, self._masters, **self._options(plan))
        self.planner.start(plan, self.esj)
        self._prepare_sinks()

    def _restore(self, cid: int, meta: dict[str, Any]) -> None:
        self.known = {n: multiconf.load(d, f"checkpoint {cid}: job {n}") for n, d in meta["jobs"].items()}
        self.layouts = dict(meta["layouts"])
        self.partition_rows = {k: int(v) for k, v in meta["partition_rows"].items()}
        self.done = {k: int(v) for k, v in meta["sources"].items()}
        self.totals = {n: JobTotals(**t) for n, t in meta["totals"].items()}
        self._streams.clear()
        self._masters.clear()
        self._master_cols.clear()
        self._add_inputs(self.known)
        esj = EpochedSharedJoin([], self._streams, self._masters, cost_model=self.cost_model)
        esj.restore(self.state_dir, {s.name: s for s in self._specs(self.known)}, cid)
        self.esj = esj
        self.last_id = cid
        cur = {n: self.known[n] for n in esj.current.jobs}
        plan = RunPlan.from_dict(meta["plan"]) if "plan" in meta else self._make_plan(cur, None)
        self.planner.start(plan, esj)
        self._prepare_sinks()

    def _switch_if_changed(self) -> None:
        assert self.esj is not None  # noqa: S101
        live = {n for _, sj in self.esj.epochs() for n in sj.jobs}
        for n, cfg in self.jobs.jobs.items():
            if n in live and multiconf.dump(self.known[n]) != multiconf.dump(cfg):
                raise ConfigError(
                    f"job {n!r} differs from the one in the checkpoint {self.state_dir}; a changed job is a new "
                    "job: give it a new name (the old one finishes its waiting rows and stops)"
                )
        if set(self.esj.current.jobs) == set(self.jobs.jobs):
            return
        multiconf.check([*[c for n, c in self.known.items() if n not in self.jobs.jobs], *self.jobs.jobs.values()])
        new = {n: c for n, c in self.jobs.jobs.items() if n not in self.known}
        self.known.update(self.jobs.jobs)
        for n in new:
            self.totals.setdefault(n, JobTotals())
        self._add_inputs(self.known)
        old = self.planner.plan
        plan = self._make_plan(self.jobs.jobs, old.assumed if old else None)
        epoch = self.esj.reconfigure(self._specs(self.jobs.jobs), **self._options(plan))
        self.planner.start(plan, self.esj)
        self.switched = True
        log.warning(
            "jobs changed: epoch %d runs %s; %d older epoch(s) finish their waiting tuples",
            epoch,
            ", ".join(self.jobs.jobs),
            len(self.esj.draining),
            extra=fields(event="switch", epoch=epoch, jobs=list(self.jobs.jobs)),
        )
        self._prepare_sinks()

    def _add_inputs(self, cfgs: dict[str, JobConfig]) -> None:
        """Streams (schema + one 'has key' flag per key) and master scans (union of columns) of ``cfgs``."""
        by_source: dict[str, list[JobConfig]] = {}
        by_master: dict[str, list[JobConfig]] = {}
        for c in cfgs.values():
            by_source.setdefault(multiconf.source_id(c), []).append(c)
            by_master.setdefault(multiconf.master_id(c), []).append(c)
        for sid, cs in by_source.items():
            keys = sorted({c.join.stream_key for c in cs} | set(flag_keys(self._streams.get(sid))))
            self._streams[sid] = pa.schema(
                [*cs[0].stream_schema, *(pa.field(HAS + k, pa.bool_(), nullable=False) for k in keys)]
            )
        for mid, cs in by_master.items():
            cols: list[str] | None = []
            for c in cs:
                if c.master.columns is None or cols is None:
                    cols = None
                else:
                    cols += [x for x in c.master.columns if x not in cols]
            if mid in self._masters:
                have = self._master_cols[mid]
                if have is None or (cols is not None and all(x in have for x in cols)):
                    continue
            m = cs[0].master
            if mid not in self.partition_rows:
                self.partition_rows[mid] = partition_rows_for(cs, self._info(mid, cs[0]))
            scan = SqlMasterScan(
                engine(m),
                m.table,
                m.key,
                self.partition_rows[mid],
                columns=cols,
                page_column=m.page_column,
                layout=self.layouts.get(mid),
                reader=m.reader,
            )
            self.layouts[mid] = scan.layout()
            for c in cs:
                check_key_types(c, scan.schema)
            self._masters[mid] = SharedMaster(scan, scan.schema)
            self._master_cols[mid] = cols

    def _specs(self, cfgs: dict[str, JobConfig]) -> list[SharedJobSpec]:
        out = []
        for n, c in cfgs.items():
            sid, mid = multiconf.source_id(c), multiconf.master_id(c)
            several = len(set(self.jobs.keys(sid)) | {c.join.stream_key}) if sid in self.jobs.sources else 1
            mcols = c.master.columns or list(self._masters[mid].schema.names)
            out.append(
                SharedJobSpec(
                    name=n,
                    stream=sid,
                    master=mid,
                    stream_key=c.join.stream_key,
                    master_key=c.master.key,
                    master_columns=tuple(mcols),
                    stream_columns=tuple(c.stream_schema.names),
                    how=c.join.type,
                    filter=pc.field(HAS + c.join.stream_key) if several > 1 else None,
                )
            )
        return out

    def _info(self, mid: str, cfg: JobConfig) -> tuple[int, Any]:
        if mid not in self._infos:
            self._infos[mid] = MasterSource(cfg).info()
        return self._infos[mid]

    def _make_plan(self, cfgs: dict[str, JobConfig], assumed: Assumed | None) -> RunPlan:
        """Return the plan for ``cfgs`` (what ``ssbj plan --config`` prints for them at the same assumptions)."""
        infos = {multiconf.master_id(c): self._info(multiconf.master_id(c), c) for c in cfgs.values()}
        # a rate measured for a source no job of ``cfgs`` reads is not the plan's concern
        if assumed is not None:
            sids = {multiconf.source_id(c) for c in cfgs.values()}
            assumed = Assumed({k: v for k, v in assumed.rates.items() if k in sids}, dict(assumed.waiting))
        return plan_for(list(cfgs.values()), infos, self.partition_rows, assumed, self.cost_model)

    def _options(self, plan: RunPlan) -> dict[str, Any]:
        return epoch_options(plan, self.jobs.first.join.algorithm, self.cost_model)

    def _replan(self) -> None:
        """Re-optimize at this boundary when the measurements drifted (ssbj.pipeline.multiplan)."""
        esj = self.esj
        assert esj is not None  # noqa: S101
        app = self.jobs.first.shared
        if not self.planner.due(app.measure_calls):
            return
        cur = {n: self.known[n] for n in esj.current.jobs}
        got = self.planner.replan(esj, app.drift, lambda a: self._make_plan(cur, a))
        if got is None:
            return
        plan, why = got
        epoch = esj.reconfigure(self._specs(cur), **self._options(plan))
        self.planner.start(plan, esj)
        self.planner.replans += 1
        log.warning(
            "re-optimized (%s): epoch %d runs w %s; %d older epoch(s) finish their waiting tuples",
            "; ".join(why),
            epoch,
            [g.step_rows for g in plan.groups],
            len(esj.draining),
            extra=fields(event="replan", epoch=epoch, plan=plan.to_dict()),
        )

    def _prepare_sinks(self) -> None:
        assert self.esj is not None  # noqa: S101
        schemas = {n: sj.output_schema(n) for _, sj in self.esj.epochs() for n in sj.jobs}
        for n, schema in schemas.items():
            if n not in self.sinks:
                cfg = self.known[n]
                sink, dead = build_sink(cfg.sink), build_sink(cfg.dead_letter)
                sink.prepare(schema)
                dead.prepare(DEAD_LETTER_SCHEMA)
                self.sinks[n] = (sink, dead)
                self._schemas[n] = schema

    def reset(self) -> None:
        """Forget the in-memory state: the next call reloads the newest checkpoint (after a failed batch)."""
        with self.lock:
            self.esj = None

    def position(self) -> tuple[int, int]:
        """(checkpoint id, segment 0) of the newest checkpoint; (-1, 0) before the first."""
        return (self.last_id if self.last_id is not None else -1, 0)

    def _live(self) -> list[str]:
        assert self.esj is not None  # noqa: S101
        return list(dict.fromkeys(n for _, sj in self.esj.epochs() for n in sj.jobs))

    # ------------------------------------------------------------------ calls
    def process(self, sid: str, batch_id: int, raw: Callable[[], pa.Table]) -> dict[str, Any] | None:
        """Process Spark batch ``batch_id`` of source ``sid`` (``raw`` returns its records); None if replayed."""
        with self.lock:
            t0 = time.perf_counter()
            if self.esj is None:
                self.open()
            esj = self.esj
            assert esj is not None  # noqa: S101
            done = self.done.get(sid)
            if done is not None and batch_id <= done:
                if batch_id < done:
                    raise StateError(
                        f"Spark batch {batch_id} of {sid} is older than batch {done}, already in the checkpoint "
                        f"{self.state_dir}: was the Spark checkpoint reset?"
                    )
                log.info("batch %d of %s is already in the state: skipped", batch_id, sid, extra=fields(event="replay"))
                return None
            cid = self._next_id()
            self._replan()
            decoded = self._decoders[sid](raw())
            faults.crash_point("after-decode", cid)
            t1 = time.perf_counter()
            live = self._live()
            dead: dict[str, pa.Table] = {}
            names = self.jobs.sources[sid]
            keys = self.jobs.keys(sid)
            records = 0
            for n in names:
                d = decoded.for_key(self.jobs.jobs[n].join.stream_key)
                dead[n] = d.dead
                records = d.rows.num_rows + d.dead.num_rows
                self.totals[n].records_in += records
                self.totals[n].dead_letters += d.dead.num_rows
            self.planner.count(sid, records)
            esj = self.esj
            assert esj is not None  # noqa: S101
            esj.push(sid, with_flags(self._streams[sid], decoded, keys))
            outs: dict[str, list[pa.Table]] = {}
            steps = 0
            while esj.current.pending():
                _merge(outs, esj.step())
                steps += 1
            if steps == 0 and esj.pending(drain=True):
                _merge(outs, esj.step(drain=True))  # keep the R-cycles of waiting tuples moving
                steps = 1
            t2 = time.perf_counter()
            written = self._write(cid, live, outs, dead)
            faults.crash_point("after-sink", cid)
            t3 = time.perf_counter()
            self.done[sid] = batch_id
            self._checkpoint(cid)
            faults.crash_point("after-checkpoint", cid)
            t4 = time.perf_counter()
            secs = {"decode": t1 - t0, "join": t2 - t1, "write": t3 - t2, "checkpoint": t4 - t3}
            return self._report("batch", cid, sid, batch_id, records, steps, written, secs)

    def drain(self) -> dict[str, Any] | None:
        """Finish every waiting tuple of every epoch, under a checkpoint id of its own."""
        with self.lock:
            if self.esj is None:
                self.open()
            esj = self.esj
            assert esj is not None  # noqa: S101
            if not esj.pending(drain=True):
                return None
            t0 = time.perf_counter()
            cid = self._next_id()
            live = self._live()
            outs: dict[str, list[pa.Table]] = {}
            steps = 0
            for part in esj.drain():
                _merge(outs, part)
                steps += 1
            t1 = time.perf_counter()
            written = self._write(cid, live, outs, {})
            t2 = time.perf_counter()
            self._checkpoint(cid)
            secs = {"join": t1 - t0, "write": t2 - t1, "checkpoint": time.perf_counter() - t2}
            return self._report("drain", cid, None, None, 0, steps, written, secs)

    def _next_id(self) -> int:
        return 0 if self.last_id is None else self.last_id + 1

    def _write(
        self, cid: int, live: list[str], outs: dict[str, list[pa.Table]], dead: dict[str, pa.Table]
    ) -> dict[str, int]:
        """Every live job's rows and dead letters of this call, replacing (cid, 0) in its sinks."""
        assert self.esj is not None  # noqa: S101
        written = {}
        for n in live:
            sink, dsink = self.sinks[n]
            parts = outs.get(n, [])
            out = pa.concat_tables(parts) if len(parts) > 1 else (parts[0] if parts else None)
            if out is None:
                out = self._schemas[n].empty_table()
            sink.write(cid, 0, out)
            dsink.write(cid, 0, dead.get(n, DEAD_LETTER_SCHEMA.empty_table()))
            self.totals[n].output_rows += out.num_rows
            written[n] = out.num_rows
        return written

    def _checkpoint(self, cid: int) -> None:
        assert self.esj is not None  # noqa: S101
        live = self._live()
        for n in [n for n in self.known if n not in live]:  # their epochs have drained: nothing left to write
            del self.known[n]
            sink, dsink = self.sinks.pop(n)
            sink.close()
            dsink.close()
        meta = {
            "jobs": {n: multiconf.dump(c) for n, c in self.known.items()},
            "layouts": self.layouts,
            "partition_rows": self.partition_rows,
            "sources": self.done,
            "totals": {n: asdict(t) for n, t in self.totals.items()},
            **self.planner.meta(),
        }
        self.esj.checkpoint(self.state_dir, cid, meta, before_commit=lambda: faults.crash_point("in-checkpoint", cid))
        self.last_id = cid

    # ------------------------------------------------------------------ reporting
    def counts(self) -> dict[str, RunCounts]:
        """Each job's counts (they reconcile: records = matched + unmatched + waiting + dead letters)."""
        with self.lock:
            if self.esj is None:
                self.open()
            assert self.esj is not None  # noqa: S101
            c = self.esj.counts()
            out = {}
            for n, t in self.totals.items():
                jc = c.get(n)
                out[n] = RunCounts(
                    records_in=t.records_in,
                    matched_source_rows=jc.matched if jc else 0,
                    unmatched_source_rows=jc.unmatched if jc else 0,
                    waiting=jc.waiting if jc else 0,
                    dead_letters=t.dead_letters,
                    output_rows=t.output_rows,
                )
            return out

    def _report(
        self,
        event: str,
        cid: int,
        sid: str | None,
        batch_id: int | None,
        records: int,
        steps: int,
        written: dict[str, int],
        seconds: dict[str, float],
    ) -> dict[str, Any]:
        assert self.esj is not None  # noqa: S101
        now = time.time()
        wall, self._last_end = max(now - self._last_end, 1e-9), now
        mem = {f"epoch-{e}": sj.memory() for e, sj in self.esj.epochs()}
        counts = self.counts()
        progress = {
            "event": event,
            "checkpoint_id": cid,
            "source": sid,
            "spark_batch_id": batch_id,
            "records_in": records,
            "arrival_rate": records / wall,
            "steps": steps,
            "epochs": len(self.esj.epochs()),
            "output_rows": written,
            "waiting_tuples": {n: c.waiting for n, c in counts.items() if c.waiting},
            "memory_bytes": sum(m["total"] for m in mem.values()),
            "memory": mem,
            "master_rows_read": sum(sj.master_rows_read() for _, sj in self.esj.epochs()),
            "plan": self.planner.meta().get("plan"),
            "replans": self.planner.replans,
            "seconds": seconds,
            "totals": {n: c.to_dict() for n, c in counts.items()},
        }
        self.last_progress = progress
        log.info(
            "%s %d (%s): %d records, %d rows out",
            event,
            cid,
            sid or "drain",
            records,
            sum(written.values()),
            extra=fields(**progress),
        )
        return progress


def _merge(into: dict[str, list[pa.Table]], part: dict[str, pa.Table]) -> None:
    for k, t in part.items():
        into.setdefault(k, []).append(t)
