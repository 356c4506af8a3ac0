"""The data-quality gate: a Great Expectations 1.x suite generated from the job configuration.

Checks on the enriched rows of one run (found by the run's batch range in the audit table):

* the join key is not NULL (a NULL key never matches, so an enriched row with one is wrong);
* with an inner join, master columns that are NOT NULL in the master table are not NULL;
* ``quality.not_null`` columns are not NULL, ``quality.ranges`` columns are within range;
* reconciliation: the run's enriched rows and dead letters in the warehouse are as many as the
  audit row says, the distinct ``quality.source_id`` values are the enriched source rows, and
  rows in = enriched source rows + unmatched + dead-lettered (+ still waiting).

The suite runs on a Spark DataFrame or on the warehouse table itself (a GX SQL data source
with a query asset, so the database does the work).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from ssbj import credentials
from ssbj.config import AnyJobConfig, DatabaseSink, JobConfig, Quality
from ssbj.contracts import RunCounts, TableName
from ssbj.errors import ConfigError, StateError
from ssbj.pipeline.audit import RunRange, Warehouse, audit_counts
from ssbj.pipeline.factory import MasterSource

log = logging.getLogger("ssbj.quality")


@dataclass
class Expectation:
    """One expectation, independent of GX: its type name, its arguments and what it guards."""

    kind: str
    kwargs: dict[str, Any]
    why: str


@dataclass
class CheckResult:
    """The outcome of a run's checks."""

    job: str
    run_id: str
    success: bool
    failing_rows: int
    checks: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> str:
        """Return a readable summary, one line per failed check."""
        failed = [c for c in self.checks if not c["success"]]
        head = f"{self.job} run {self.run_id}: {len(self.checks) - len(failed)}/{len(self.checks)} checks passed"
        lines = [head + ("" if not failed else f", {self.failing_rows:,} rows failing")]
        for c in failed:
            lines.append(f"  FAILED {c['expectation']} {c['kwargs']}: {c['why']} (observed {c['observed']})")
        return "\n".join(lines)


def build_suite(cfg: JobConfig, columns: list[str], master_not_null: list[str], counts: RunCounts) -> list[Expectation]:
    """Return the expectations for a run with audit ``counts``, on a table with ``columns``."""
    out: list[Expectation] = []
    if cfg.join.type == "inner":  # a left join keeps NULL-key rows, NULL-padded
        out.append(
            Expectation(
                "ExpectColumnValuesToNotBeNull",
                {"column": cfg.join.stream_key},
                "an enriched row has a join key (NULL keys never match)",
            )
        )
        for c in master_not_null:
            out.append(
                Expectation("ExpectColumnValuesToNotBeNull", {"column": c}, "master column NOT NULL in R, inner join")
            )
    source_rows = counts.matched_source_rows if cfg.join.type == "inner" else None
    return out + declared_expectations(cfg.quality, columns, counts, source_rows, {e.kwargs["column"] for e in out})


def declared_expectations(
    q: Quality, columns: list[str], counts: RunCounts, source_rows: int | None, not_null_already: set[str]
) -> list[Expectation]:
    """Return the job file's expectations, the row count and (with ``source_rows``) the distinct source ids.

    ``source_rows`` is None where the audit has no per-record figure to compare with.
    """
    out: list[Expectation] = []
    for c in q.not_null:
        if c not in columns:
            raise ConfigError(f"quality.not_null: {c!r} is not an output column ({', '.join(columns)})")
        if c not in not_null_already:
            out.append(Expectation("ExpectColumnValuesToNotBeNull", {"column": c}, "declared in quality.not_null"))
    for c, r in q.ranges.items():
        if c not in columns:
            raise ConfigError(f"quality.ranges: {c!r} is not an output column ({', '.join(columns)})")
        out.append(
            Expectation(
                "ExpectColumnValuesToBeBetween",
                {"column": c, "min_value": r.min, "max_value": r.max},
                "declared in quality.ranges",
            )
        )
    out.append(
        Expectation(
            "ExpectTableRowCountToEqual",
            {"value": counts.output_rows},
            "the warehouse holds every output row the run produced, once",
        )
    )
    if q.source_id is not None:
        if q.source_id not in columns:
            raise ConfigError(f"quality.source_id: {q.source_id!r} is not an output column ({', '.join(columns)})")
        if source_rows is not None:
            out.append(
                Expectation(
                    "ExpectColumnUniqueValueCountToBeBetween",
                    {"column": q.source_id, "min_value": source_rows, "max_value": source_rows},
                    "distinct source records in the output = output source rows in the audit",
                )
            )
    return out


def _gx_suite(name: str, expectations: list[Expectation]) -> Any:
    os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in task logs
    import great_expectations as gx
    import great_expectations.expectations as gxe

    suite = gx.ExpectationSuite(name=name)
    for e in expectations:
        suite.add_expectation(getattr(gxe, e.kind)(**e.kwargs))
    return suite


def _snake(name: str) -> str:
    return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in name).lstrip("_")


def _results(res: Any, expectations: list[Expectation]) -> tuple[list[dict[str, Any]], int]:
    checks = []
    failing = 0
    why = {(_snake(e.kind), e.kwargs.get("column")): e.why for e in expectations}
    for r in res.results:
        conf = r.expectation_config
        kwargs = {k: v for k, v in dict(conf.kwargs).items() if k != "batch_id"}
        result = dict(r.result or {})
        unexpected = int(result.get("unexpected_count") or 0)
        if not r.success:
            failing += unexpected
        checks.append(
            {
                "expectation": conf.type,
                "kwargs": kwargs,
                "success": bool(r.success),
                "why": why.get((conf.type, kwargs.get("column")), ""),
                "observed": result.get("observed_value", f"{unexpected} unexpected"),
                "unexpected_count": unexpected,
                "partial_unexpected_list": [str(x) for x in (result.get("partial_unexpected_list") or [])[:10]],
            }
        )
    return checks, failing


def validate_spark(df: Any, expectations: list[Expectation], name: str = "ssbj") -> tuple[list[dict[str, Any]], int]:
    """Validate a Spark DataFrame; returns (check results, rows failing)."""
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    asset = context.data_sources.add_spark(name=f"{name}-spark").add_dataframe_asset(name=f"{name}-rows")
    batch = asset.add_batch_definition_whole_dataframe(f"{name}-batch").get_batch(batch_parameters={"dataframe": df})
    return _results(batch.validate(_gx_suite(name, expectations)), expectations)


def validate_table(
    engine: sa.Engine, query: str, expectations: list[Expectation], name: str = "ssbj"
) -> tuple[list[dict[str, Any]], int]:
    """Validate the rows of ``query`` through ``engine``; returns (check results, rows failing).

    GX's fluent SQL data source builds engines of its own from a connection string (one for
    the data source, one for its execution engine), so the batch is built on the caller's
    engine instead: GX's SQLAlchemy execution engine accepts one, and the query is read as a
    sub-query (no temporary table, as the fluent query asset does by default).
    """
    import great_expectations as gx
    from great_expectations.core.batch import Batch, LegacyBatchDefinition
    from great_expectations.core.batch_spec import RuntimeQueryBatchSpec
    from great_expectations.core.id_dict import IDDict
    from great_expectations.execution_engine.sqlalchemy_execution_engine import SqlAlchemyExecutionEngine
    from great_expectations.validator.validator import Validator

    context = gx.get_context(mode="ephemeral")
    execution = SqlAlchemyExecutionEngine(engine=engine, create_temp_table=False)
    spec = RuntimeQueryBatchSpec(query=query)
    data, markers = execution.get_batch_data_and_markers(batch_spec=spec)
    definition = LegacyBatchDefinition(
        datasource_name=f"{name}-sql",
        data_connector_name="query",
        data_asset_name=f"{name}-rows",
        batch_identifiers=IDDict({}),
    )
    # GX annotates `data` as a BatchData class, but it holds (and its own code passes) an instance
    batch = Batch(data=data, batch_definition=definition, batch_spec=spec, batch_markers=markers)  # type: ignore[arg-type]
    validator = Validator(
        execution_engine=execution,
        batches=[batch],
        expectation_suite=_gx_suite(name, expectations),
        data_context=context,
    )
    return _results(validator.validate(), expectations)


def _master_not_null(cfg: JobConfig) -> list[str]:

    schema = MasterSource(cfg).schema()
    cols = cfg.master.columns if cfg.master.columns is not None else schema.names
    return [c for c in cols if c in schema.names and not schema.field(c).nullable]


def check_run(cfg: JobConfig, run_id: str, engine: sa.Engine | None = None) -> CheckResult:
    """Run the suite on the warehouse rows of ``run_id``; store the result; update the audit row."""
    not_null = _master_not_null(cfg)
    return run_checks(cfg, run_id, lambda columns, counts: build_suite(cfg, columns, not_null, counts), engine)


def run_checks(
    cfg: AnyJobConfig,
    run_id: str,
    suite: Callable[[list[str], RunCounts], list[Expectation]],
    engine: sa.Engine | None = None,
) -> CheckResult:
    """Validate ``suite(columns, counts)`` on the warehouse rows of ``run_id`` and reconcile the counts.

    Stores the result and updates the audit row: every job kind's ``ssbj check``.
    """
    if not isinstance(cfg.sink, DatabaseSink):
        raise ConfigError("the quality gate needs a sink of kind database")
    wh = Warehouse(cfg, engine)
    row = wh.run(run_id)
    rng = RunRange((row["from_batch_id"], row["from_segment"]), (row["to_batch_id"], row["to_segment"]))
    enriched = wh.enriched()
    expectations = suite([c.name for c in enriched.columns], audit_counts(row))
    query = str(
        sa.select(enriched)
        .where(rng.predicate(enriched))
        .compile(dialect=wh.engine.dialect, compile_kwargs={"literal_binds": True})
    )  # literals are the run's integer batch ids and segments only
    checks, failing = validate_table(wh.engine, query, expectations, cfg.name)
    checks.append(_reconcile(cfg, wh, row, rng))
    success = all(c["success"] for c in checks)
    result = CheckResult(cfg.name, run_id, success, failing, checks)
    _store(cfg, result)
    wh.set_status(run_id, "checked" if success else "failed", failing, {"checks": checks})
    log.info(result.summary())
    return result


def _reconcile(cfg: AnyJobConfig, wh: Warehouse, row: dict[str, Any], rng: RunRange) -> dict[str, Any]:
    """Check rows in = enriched source rows + unmatched + dead-lettered + waiting, and the dead letters."""
    dead_in_table = None
    if isinstance(cfg.dead_letter, DatabaseSink):
        dl_name = TableName.parse(cfg.dead_letter.table)
        eng = credentials.engine(cfg.dead_letter)  # the warehouse's own engine when both tables live there
        dl = sa.Table(dl_name.name, sa.MetaData(), schema=dl_name.schema, autoload_with=eng)
        with eng.connect() as conn:
            stmt = sa.select(sa.func.count()).select_from(dl).where(rng.predicate(dl))
            dead_in_table = int(conn.execute(stmt).scalar_one())
    c = audit_counts(row)
    ok = c.reconciled and (dead_in_table is None or dead_in_table == c.dead_letters)
    return {
        "expectation": "RowCountReconciliation",
        "kwargs": {"rows_in": c.records_in},
        "success": ok,
        "why": "rows in = enriched source rows + unmatched + dead-lettered + waiting, every dead letter stored",
        "observed": {
            "enriched_source_rows": c.matched_source_rows,
            "unmatched": c.unmatched_source_rows,
            "dead_lettered": c.dead_letters,
            "waiting": c.waiting,
            "dead_letters_in_table": dead_in_table,
        },
        "unexpected_count": 0 if ok else abs(c.unaccounted),
        "partial_unexpected_list": [],
    }


def result_path(cfg: AnyJobConfig, run_id: str) -> Path:
    """Return where the JSON result of a run's checks is stored."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in run_id)
    return Path(cfg.checkpoint) / "quality" / f"{safe}.json"


def _store(cfg: AnyJobConfig, result: CheckResult) -> None:
    path = result_path(cfg, result.run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result.__dict__, indent=1, default=str))
    os.replace(tmp, path)


def load_result(cfg: AnyJobConfig, run_id: str) -> CheckResult:
    """Return the stored result of ``ssbj check`` for ``run_id``."""
    path = result_path(cfg, run_id)
    if not path.exists():
        raise StateError(f"run {run_id!r} of {cfg.name!r} has not been checked (no {path})")
    d = json.loads(path.read_text())
    return CheckResult(**d)


@dataclass
class GateOutcome:
    """What the gate did with a checked run's rows."""

    published: bool
    rows: int
    message: str


def gate_run(cfg: AnyJobConfig, run_id: str) -> GateOutcome:
    """Publish a checked run's rows if every check passed, else quarantine them with the summary."""
    result = load_result(cfg, run_id)
    wh = Warehouse(cfg)
    if result.success:
        n = wh.publish(run_id)
        return GateOutcome(
            True, n, f"{cfg.name} run {run_id}: checks passed; {n:,} rows published to {wh.published_name}"
        )
    summary = result.summary()
    n = wh.quarantine(run_id, summary)
    return GateOutcome(False, n, f"{cfg.name} run {run_id}: {n:,} rows quarantined in {wh.quarantine_name}\n{summary}")
