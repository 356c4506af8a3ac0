"""Runs of a job in the warehouse: the audit table, and publishing or quarantining a run's rows.

A *run* (one ``ssbj run --run-id X``, e.g. one Airflow DAG run) wrote the (batch id, segment)
pairs after the checkpoint it started from, up to the one it ended at; the audit row keeps
both ends, so the run's rows are found again by that range. A retried run id keeps its first
start, so rows written by a failed attempt still belong to the run.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from ssbj import credentials
from ssbj.adapters.sql_common import arrow_type_for_sql
from ssbj.config import AnyJobConfig, DatabaseSink
from ssbj.contracts import BATCH_ID_COLUMN, SEGMENT_COLUMN, RunCounts, TableName
from ssbj.errors import ConfigError, InputError, StateError
from ssbj.warehouse import REASON_COLUMN, RUN_ID_COLUMN, audit_table, published_table, quarantine_table


@dataclass(frozen=True)
class RunRange:
    """The (batch id, segment) pairs a run wrote: after ``start`` (exclusive), up to ``end``."""

    start: tuple[int, int]
    end: tuple[int, int]

    def predicate(self, table: sa.Table) -> sa.ColumnElement[bool]:
        """Return the condition selecting rows of ``table`` in the range (lexicographic on batch id, segment)."""
        b, s = table.c[BATCH_ID_COLUMN], table.c[SEGMENT_COLUMN]
        (b0, s0), (b1, s1) = self.start, self.end
        after_start = sa.or_(b > b0, sa.and_(b == b0, s > s0))
        up_to_end = sa.or_(b < b1, sa.and_(b == b1, s <= s1))
        return sa.and_(after_start, up_to_end)


# audit table column -> RunCounts field: the one place where the two names meet (the columns
# keep the names of the published warehouse DDL)
AUDIT_COUNTS = {
    "rows_in": "records_in",
    "rows_enriched": "output_rows",
    "source_rows_enriched": "matched_source_rows",
    "unmatched": "unmatched_source_rows",
    "dead_lettered": "dead_letters",
    "waiting": "waiting",
}


def audit_counts(row: Mapping[str, Any]) -> RunCounts:
    """Return the counts of an audit row."""
    return RunCounts(**{name: int(row[column] or 0) for column, name in AUDIT_COUNTS.items()})


def gate_table_names(cfg: AnyJobConfig) -> tuple[str, str, str]:
    """Return the (published, quarantine, audit) table names of a job whose sink is a database."""
    if not isinstance(cfg.sink, DatabaseSink):
        raise ConfigError("the audit table and the publish step need a sink of kind database")
    q = cfg.quality
    return (
        q.published_table or f"{cfg.sink.table}_published",
        q.quarantine_table or f"{cfg.sink.table}_quarantine",
        q.audit_table,
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Warehouse:
    """The job's warehouse database: enriched, published, quarantine and audit tables."""

    def __init__(self, cfg: AnyJobConfig, engine: sa.Engine | None = None) -> None:
        self.published_name, self.quarantine_name, self.audit_name = gate_table_names(cfg)
        assert isinstance(cfg.sink, DatabaseSink)  # noqa: S101  (checked by gate_table_names)
        self.cfg = cfg
        if engine is None:
            engine = credentials.engine(cfg.sink)
        self.engine = engine
        self.enriched_name = cfg.sink.table
        self._md = sa.MetaData()
        self.audit = audit_table(self._md, self.audit_name)

    def enriched(self) -> sa.Table:
        """Return the table the job loads (reflected: the sink creates it)."""
        t = TableName.parse(self.enriched_name)
        return sa.Table(t.name, sa.MetaData(), schema=t.schema, autoload_with=self.engine)

    def _gate_tables(self) -> tuple[sa.Table, sa.Table, sa.Table]:

        src = self.enriched()

        fields = []
        for c in src.columns:
            if c.name in (BATCH_ID_COLUMN, SEGMENT_COLUMN):
                continue
            at = arrow_type_for_sql(c.type, self.engine.dialect.name)
            if at is None:
                raise InputError(f"column {c.name!r} of {self.enriched_name} has an unsupported type {c.type}")
            fields.append(pa.field(c.name, at, nullable=bool(c.nullable)))
        schema = pa.schema(fields)
        md = sa.MetaData()
        pub = published_table(md, self.published_name, schema)
        qua = quarantine_table(md, self.quarantine_name, schema)
        md.create_all(self.engine, checkfirst=True)
        return src, pub, qua

    # ------------------------------------------------------------------ audit
    def begin_run(self, run_id: str, start: tuple[int, int]) -> RunRange:
        """Record that run ``run_id`` starts after ``start``; a retried run keeps its first start."""
        self._md.create_all(self.engine, tables=[self.audit], checkfirst=True)
        a = self.audit
        job = self.cfg.name
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(a).where(a.c.job == job, a.c.run_id == run_id)).mappings().first()
            if row is not None:
                return RunRange((row["from_batch_id"], row["from_segment"]), (row["to_batch_id"], row["to_segment"]))
            conn.execute(
                sa.insert(a).values(
                    job=job,
                    run_id=run_id,
                    from_batch_id=start[0],
                    from_segment=start[1],
                    to_batch_id=start[0],
                    to_segment=start[1],
                    **dict.fromkeys(AUDIT_COUNTS, 0),
                    status="running",
                    started_at=_now(),
                )
            )
        return RunRange(start, start)

    def finish_run(self, run_id: str, end: tuple[int, int], counts: RunCounts, seconds: float) -> None:
        """Record the end of a run's load: its last (batch, segment) and what it counted."""
        a = self.audit
        with self.engine.begin() as conn:
            prev = conn.execute(sa.select(a).where(a.c.job == self.cfg.name, a.c.run_id == run_id)).mappings().one()
            before = audit_counts(dict(prev))
            # a retried run adds to its first attempts' sums; waiting is a level, not a sum
            summed = {c: getattr(before, n) + getattr(counts, n) for c, n in AUDIT_COUNTS.items() if n != "waiting"}
            conn.execute(
                sa.update(a)
                .where(a.c.job == self.cfg.name, a.c.run_id == run_id)
                .values(
                    to_batch_id=end[0],
                    to_segment=end[1],
                    **summed,
                    waiting=counts.waiting,
                    duration_seconds=(prev["duration_seconds"] or 0.0) + seconds,
                    status="loaded",
                    finished_at=_now(),
                )
            )

    def run(self, run_id: str) -> dict[str, Any]:
        """Return the audit row of ``run_id``."""
        a = self.audit
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(a).where(a.c.job == self.cfg.name, a.c.run_id == run_id)).mappings().first()
        if row is None:
            raise StateError(f"no run {run_id!r} of job {self.cfg.name!r} in {self.audit_name}")
        return dict(row)

    def run_range(self, run_id: str) -> RunRange:
        """Return the (batch, segment) range of ``run_id``."""
        r = self.run(run_id)
        return RunRange((r["from_batch_id"], r["from_segment"]), (r["to_batch_id"], r["to_segment"]))

    def set_status(self, run_id: str, status: str, failing: int | None = None, details: Any = None) -> None:
        """Update a run's status (checked, published, quarantined) and check results."""
        a = self.audit
        values: dict[str, Any] = {"status": status}
        if failing is not None:
            values["rows_failing_checks"] = failing
        if details is not None:
            values["details"] = json.dumps(details, default=str)[:60000]
        with self.engine.begin() as conn:
            conn.execute(sa.update(a).where(a.c.job == self.cfg.name, a.c.run_id == run_id).values(**values))

    # ------------------------------------------------------------------ publish / quarantine
    def _move(self, run_id: str, target: str, reason: str | None) -> int:
        src, pub, qua = self._gate_tables()
        rng = self.run_range(run_id)
        dest = pub if target == "published" else qua
        other = qua if target == "published" else pub
        cols = [c.name for c in src.columns]
        select_cols: list[Any] = [src.c[c] for c in cols] + [sa.literal(run_id, sa.String(250))]
        dest_cols = [*cols, RUN_ID_COLUMN]
        if dest is qua:
            select_cols.append(sa.literal(reason or "", sa.Text()))
            dest_cols.append(REASON_COLUMN)
        with self.engine.begin() as conn:  # idempotent: a repeated publish or quarantine replaces
            conn.execute(sa.delete(dest).where(dest.c[RUN_ID_COLUMN] == run_id))
            conn.execute(sa.delete(other).where(other.c[RUN_ID_COLUMN] == run_id))
            n = conn.execute(
                sa.insert(dest).from_select(dest_cols, sa.select(*select_cols).where(rng.predicate(src)))
            ).rowcount
        return int(n)

    def publish(self, run_id: str) -> int:
        """Copy the run's rows into the published table; returns how many."""
        n = self._move(run_id, "published", None)
        self.set_status(run_id, "published")
        return n

    def quarantine(self, run_id: str, reason: str) -> int:
        """Copy the run's rows into the quarantine table with ``reason``; returns how many."""
        n = self._move(run_id, "quarantine", reason)
        self.set_status(run_id, "quarantined")
        return n
