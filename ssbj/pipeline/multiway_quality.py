"""``ssbj validate`` and the quality gate of a multi-way job (the suite generated from its query).

The suite, on the rows one run wrote (the run's batch range in the audit table):

* every output column that is a join key of an **inner** edge (either side) is not NULL:
  an inner edge passes only rows whose key matched, and NULL never matches;
* master columns declared NOT NULL in the database are not NULL when their master is
  reached from the stream through inner edges only (a left edge may NULL-extend it);
* ``quality.not_null`` and ``quality.ranges`` on output columns;
* the table holds exactly the run's output rows (the audit row's count);
* with ``quality.source_id`` (an output column identifying a record) and nothing left
  waiting, its distinct values are the run's output source rows;
* rows in = output source rows + dropped + dead letters (+ waiting), every dead letter
  stored (the single-table job's reconciliation check, shared).

Publishing and quarantining are the single-table job's (``ssbj gate``).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

from ssbj.config import MultiWayJobConfig
from ssbj.contracts import RunCounts
from ssbj.errors import ConfigError
from ssbj.pipeline.factory import check_checkpoint, check_kafka_source, check_sinks
from ssbj.pipeline.multiway_masters import JobQuery
from ssbj.pipeline.quality import CheckResult, Expectation, declared_expectations, run_checks
from ssbj.sql.cli import describe

log = logging.getLogger("ssbj.quality")


def _inner_reached(query: JobQuery) -> set[str]:
    """Aliases joined to the stream through inner edges only."""
    reached = {query.spec.stream}
    w = query.spec.window
    if w is not None and w.kind == "inner":
        reached.add(w.stream)
    for e in query.spec.edges:
        if e.kind == "inner" and e.probe in reached:
            reached.add(e.master)
    return reached


def build_multiway_suite(
    cfg: MultiWayJobConfig, query: JobQuery, columns: list[str], counts: RunCounts
) -> list[Expectation]:
    """Return the expectations for a run with audit ``counts``, on a table with ``columns``."""
    spec = query.spec
    keys: set[tuple[str, str]] = set()
    for e in spec.edges:
        if e.kind == "inner":
            keys.update((e.probe, c) for c in e.probe_columns)
            keys.update((e.master, c) for c in e.master_columns)
    w = spec.window
    if w is not None and w.kind == "inner":  # the window's keys and event times: NULL never matches either
        keys.update((spec.stream, c) for c in (*w.probe_keys, w.probe_time))
        keys.update((w.stream, c) for c in (*w.keys, w.time))
    inner = _inner_reached(query)
    tables = {m.alias: m.table for m in spec.masters}
    out: list[Expectation] = []
    seen: set[str] = set()
    for o in spec.output:
        if (o.alias, o.column) in keys:
            why = "join key (or event time) of an inner join (NULL never matches)"
        elif o.alias in tables and o.alias in inner and not query.schemas[tables[o.alias]].field(o.column).nullable:
            why = "master column NOT NULL in the database, master joined by inner edges"
        else:
            continue
        seen.add(o.name)
        out.append(Expectation("ExpectColumnValuesToNotBeNull", {"column": o.name}, why))
    # with two streams the audit's output source rows count both streams' records: no per-stream figure
    source_rows = counts.matched_source_rows if counts.waiting == 0 and spec.window is None else None
    return out + declared_expectations(cfg.quality, columns, counts, source_rows, seen)


def check_multiway_run(cfg: MultiWayJobConfig, run_id: str) -> CheckResult:
    """Run the suite on the warehouse rows of ``run_id``; store the result; update the audit row."""
    query = JobQuery(cfg)
    return run_checks(cfg, run_id, lambda columns, counts: build_multiway_suite(cfg, query, columns, counts))


def validate_multiway_job(cfg: MultiWayJobConfig) -> list[str]:
    """Check everything a run needs except starting Spark: the query compiles over the real tables."""
    query = JobQuery(cfg)  # reflects every master table and compiles the SQL (the front end's errors)
    plan = query.plan(cfg.join.memory)
    streams = " and ".join(cfg.stream_names)
    out = [f"query: {streams} joined with {', '.join(cfg.masters)} at {cfg.database.display()}"]
    out += ["  " + line for line in describe(query.spec).splitlines()]
    for name in cfg.masters:
        how = (
            "held (read whole at start)"
            if plan.held[name]
            else (
                f"scanned, {plan.layouts[name]['num_rows']:,} rows in "
                f"{len(plan.layouts[name]['bounds']) + 1} partitions of b={plan.layouts[name]['partition_rows']:,}"
            )
        )
        out.append(f"master {name}: table {query.table(name)}, {how}; columns {', '.join(query.columns[name])}")
    out.append(f"output: {', '.join(f'{f.name} {f.type}' for f in query.output_schema)}")
    w = query.spec.window
    if w is not None:
        lateness = f"{cfg.join.lateness or 0:g} {'s' if isinstance(w.lateness, timedelta) else 'time units'}"
        out.append(
            f"window: {query.stream_tables[query.spec.stream]}.{w.probe_time} and "
            f"{query.stream_tables[w.stream]}.{w.time} are the event times; allowed lateness {lateness} "
            "(a later row is a dead letter); one Spark query reads both sources as a union"
        )
    for (st, src), label in zip(cfg.streams(), ("source", "second_stream.source"), strict=False):
        if src.kind == "files":
            if not Path(src.path).is_dir():
                raise ConfigError(f"{label}.path {src.path!r} is not a directory")
            out.append(f"{label}: stream {st.name}, {src.format} files in {src.path}")
        else:
            out.append(check_kafka_source(src, label) + f" (stream {st.name})")
    out += check_sinks(cfg)
    out.append(check_checkpoint(cfg))
    return out
