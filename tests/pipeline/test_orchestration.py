"""What the DAGs run, without Airflow: job lists, spark-submit arguments and the dispatch by job kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssbj.errors import ConfigError
from ssbj.pipeline.orchestration import check_job, gate_job, job_files, job_kind, run_args, submit_settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_job_files_from_the_variable_else_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("b.yaml", "a.yaml", "notes.txt"):
        (tmp_path / name).write_text("{}")
    monkeypatch.delenv("SSBJ_TEST_JOBS", raising=False)
    assert job_files("SSBJ_TEST_JOBS", tmp_path) == [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]
    monkeypatch.setenv("SSBJ_TEST_JOBS", "/x/one.yaml::/y/two.yaml")
    assert job_files("SSBJ_TEST_JOBS", tmp_path) == ["/x/one.yaml", "/y/two.yaml"]
    monkeypatch.delenv("SSBJ_TEST_JOBS")
    assert job_files("SSBJ_TEST_JOBS", tmp_path / "missing") == []


def test_run_args_for_one_job_and_for_one_application_of_several() -> None:
    assert run_args(["a.yaml"], "r1") == ["run", "--config", "a.yaml", "--run-id", "r1", "--quiet"]
    assert run_args(["a.yaml"]) == ["run", "--config", "a.yaml", "--quiet"]
    assert run_args(["a.yaml", "b.yaml"], "r2", "/ck") == [
        "run",
        "--config",
        "a.yaml",
        "b.yaml",
        "--checkpoint",
        "/ck",
        "--run-id",
        "r2",
        "--quiet",
    ]
    with pytest.raises(ConfigError, match="checkpoint"):
        run_args(["a.yaml", "b.yaml"], "r2")
    with pytest.raises(ConfigError, match="no job files"):
        run_args([])


def test_submit_settings_run_driver_and_workers_on_one_python() -> None:
    s = submit_settings("/opt/py/bin/python")
    assert s["env_vars"] == {"PYSPARK_PYTHON": "/opt/py/bin/python", "PYSPARK_DRIVER_PYTHON": "/opt/py/bin/python"}
    assert s["conf"]["spark.pyspark.python"] == "/opt/py/bin/python"


def test_job_kind_of_each_example() -> None:
    assert job_kind(EXAMPLES / "landing-to-parquet.yaml") == "single"
    assert job_kind(EXAMPLES / "multiway" / "orders-3way.yaml") == "multiway"
    assert job_kind(EXAMPLES / "cq" / "q7-landing-to-sqlite.yaml") == "cq"


def test_enrichment_checks_need_a_run_and_a_cq_table_has_no_run_to_gate() -> None:
    with pytest.raises(ConfigError, match="run id"):
        check_job(EXAMPLES / "landing-to-parquet.yaml", None)
    with pytest.raises(ConfigError, match="no run to publish"):
        gate_job(EXAMPLES / "cq" / "q7-landing-to-sqlite.yaml", "r1")
