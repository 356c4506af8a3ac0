"""The Airflow + Great Expectations stack (scripts/setup-airflow.sh) must leave pyspark 4.3 intact.

Skipped unless Airflow is installed in this venv. The traps it guards:
- apache-airflow-providers-apache-spark requires `pyspark-client`, which ships the same `pyspark/`
  package at another version and silently replaces pyspark's Python files (the jars stay);
- great-expectations[spark] pins pyspark < 4.2.
"""

from __future__ import annotations

import glob
import importlib.metadata as md
import json
import logging
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow")
# Importing Airflow installs INFO-level logging handlers on streams that pytest closes at exit; py4j then
# prints a "--- Logging error ---" traceback when it closes its gateway connection at shutdown.
logging.getLogger("py4j").setLevel(logging.WARNING)


def _jar_versions() -> set[str]:
    import pyspark

    jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "spark-core_*.jar"))
    return {m.group(1) for j in jars if (m := re.match(r"spark-core_[0-9.]+-(.+)\.jar$", os.path.basename(j)))}


def test_pyspark_python_files_match_jars() -> None:
    import pyspark

    assert _jar_versions() == {pyspark.__version__}
    assert pyspark.__version__ == md.version("pyspark")
    assert pyspark.__version__.startswith("4.3.")


def test_pyspark_client_not_installed() -> None:
    with pytest.raises(md.PackageNotFoundError):
        md.version("pyspark-client")


def test_providers_import(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.apache.spark.decorators.pyspark import pyspark_task
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
    from airflow.sdk import BaseOperator

    assert callable(pyspark_task)
    assert issubclass(SparkSubmitOperator, BaseOperator)
    assert "application" in SparkSubmitOperator.template_fields
    # the hook's pure command builder turns the DAG's connection and arguments into spark-submit
    monkeypatch.setenv("AIRFLOW_CONN_SSBJ_SPARK", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    hook = SparkSubmitHook(
        conn_id="ssbj_spark",
        conf={"spark.pyspark.python": "/venv/bin/python"},
        application_args=["run", "--config", "j"],
    )
    cmd = hook._build_spark_submit_command("/app/cli.py")
    assert cmd[:3] == ["spark-submit", "--master", "local[2]"]
    assert "spark.pyspark.python=/venv/bin/python" in cmd
    assert cmd[-4:] == ["/app/cli.py", "run", "--config", "j"]
    assert SparkSubmitHook.conn_type == "spark"
    assert SQLExecuteQueryOperator.template_fields
    assert md.version("apache-airflow").startswith("3.")


def test_great_expectations_without_spark_extra() -> None:
    import great_expectations as gx

    assert gx.__version__.startswith("1.")
    # GX[spark] would have forced pyspark < 4.2; the venv keeps 4.3.x.
    assert md.version("pyspark").startswith("4.3.")


def _suite(gx: Any, rows: int) -> Any:
    import great_expectations.expectations as gxe

    return gx.ExpectationSuite(
        name="compat",
        expectations=[
            gxe.ExpectColumnValuesToNotBeNull(column="k"),
            gxe.ExpectTableRowCountToEqual(value=rows),
        ],
    )


def test_great_expectations_validates_sqlite_table(tmp_path: Path) -> None:
    import great_expectations as gx

    db = tmp_path / "t.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (k INTEGER, v TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(1, "a"), (2, "b"), (3, None)])
    context = gx.get_context(mode="ephemeral")
    batch_def = (
        context.data_sources.add_sqlite(name="db", connection_string=f"sqlite:///{db}")
        .add_table_asset(name="t", table_name="t")
        .add_batch_definition_whole_table(name="all")
    )
    assert batch_def.get_batch().validate(_suite(gx, 3)).success
    assert not batch_def.get_batch().validate(_suite(gx, 4)).success


def test_great_expectations_validates_spark_dataframe(spark: Any) -> None:
    import great_expectations as gx

    df = spark.range(100).withColumnRenamed("id", "k")
    context = gx.get_context(mode="ephemeral")
    batch_def = (
        context.data_sources.add_spark(name="spark")
        .add_dataframe_asset(name="df")
        .add_batch_definition_whole_dataframe(name="all")
    )
    result = batch_def.get_batch(batch_parameters={"dataframe": df}).validate(_suite(gx, 100))
    assert result.success, result
    assert not batch_def.get_batch(batch_parameters={"dataframe": df.limit(7)}).validate(_suite(gx, 100)).success
