"""The Great Expectations suite of a continuous query's maintained result table.

* every group-by column is not NULL (``quality: nullable_keys`` is not offered: a query
  grouping by a nullable column fails this check on purpose, so the choice is visible);
* the group key is unique: one row per group, the upserts never duplicated one;
* ``COUNT`` outputs are >= 0 (``COUNT(*)`` >= 1: a group whose count reaches 0 is deleted);
* the table holds as many rows as the engine's answer at the last checkpoint.

The suite runs on the table in the database (the SQL path of :mod:`ssbj.pipeline.quality`)
or on the Parquet result file (GX's pandas data source).
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow.parquet as pq
import sqlalchemy as sa

from ssbj.adapters.result_table import RESULT_FILE
from ssbj.config import ParquetSink
from ssbj.config_cq import CqJobConfig
from ssbj.contracts import TableName
from ssbj.core.checkpoint import DirectoryStore
from ssbj.credentials import engine
from ssbj.errors import ConfigError, StateError
from ssbj.pipeline.quality import CheckResult, Expectation, _gx_suite, _results, validate_table


def build_result_suite(cfg: CqJobConfig, result_rows: int) -> list[Expectation]:
    """Return the expectations for the result table of ``cfg``, whose engine state has ``result_rows`` groups."""
    plan = cfg.plan
    key = cfg.key_columns
    out = [Expectation("ExpectColumnValuesToNotBeNull", {"column": k}, "a group-by column of the answer") for k in key]
    if len(key) == 1:
        out.append(Expectation("ExpectColumnValuesToBeUnique", {"column": key[0]}, "one row per group"))
    elif key:
        out.append(Expectation("ExpectCompoundColumnsToBeUnique", {"column_list": key}, "one row per group"))
    for o in plan.outputs:
        if o.agg is None or plan.aggregates[o.agg].func != "count":
            continue
        least = 1 if plan.aggregates[o.agg].arg is None else 0
        why = "COUNT(*) of a present group" if least else "a count is never negative"
        out.append(Expectation("ExpectColumnValuesToBeBetween", {"column": o.name, "min_value": least}, why))
    out.append(
        Expectation(
            "ExpectTableRowCountToEqual",
            {"value": result_rows},
            "the table holds exactly the groups of the engine's answer at its last checkpoint",
        )
    )
    return out


def checkpointed_rows(cfg: CqJobConfig) -> tuple[int, int]:
    """(batch id, groups in the answer) of the newest engine checkpoint."""
    store = DirectoryStore(cfg.engine_checkpoint)
    if store.latest() is None:
        raise StateError(f"{cfg.name}: no checkpoint in {cfg.engine_checkpoint}: the job has not run")
    _, manifest = store.read_manifest()
    return int(manifest["batch_id"]), int(manifest["result_rows"])


def _validate_pandas(frame: Any, expectations: list[Expectation], name: str) -> tuple[list[dict[str, Any]], int]:
    os.environ.setdefault("TQDM_DISABLE", "1")
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    asset = context.data_sources.add_pandas(name=f"{name}-pandas").add_dataframe_asset(name=f"{name}-result")
    batch = asset.add_batch_definition_whole_dataframe(f"{name}-batch").get_batch(batch_parameters={"dataframe": frame})
    return _results(batch.validate(_gx_suite(name, expectations)), expectations)


def check_result(cfg: CqJobConfig) -> CheckResult:
    """Run the suite on the result table as the last batch left it."""
    sink = cfg.target.result
    if sink is None:
        raise ConfigError(f"{cfg.name}: the job has no target.result to check")
    batch_id, rows = checkpointed_rows(cfg)
    expectations = build_result_suite(cfg, rows)
    if isinstance(sink, ParquetSink):
        frame = pq.read_table(os.path.join(sink.path, RESULT_FILE)).to_pandas()
        checks, failing = _validate_pandas(frame, expectations, cfg.name)
    else:
        eng = engine(sink)
        name = TableName.parse(sink.table)
        table = sa.Table(name.name, sa.MetaData(), schema=name.schema, autoload_with=eng)
        query = str(sa.select(table).compile(dialect=eng.dialect))
        checks, failing = validate_table(eng, query, expectations, cfg.name)
    return CheckResult(cfg.name, f"batch {batch_id}", all(c["success"] for c in checks), failing, checks)
