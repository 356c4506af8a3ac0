"""Every error ssbj raises is in the SSBJError tree, and is either transient or terminal."""

import inspect
import logging
import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

import ssbj.errors
from ssbj import credentials
from ssbj.adapters.kafka_source import KafkaSourceError
from ssbj.adapters.master_layout import decode_value
from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.adapters.sink_parquet import ParquetDirSink
from ssbj.adapters.sink_sql import SqlTableSink
from ssbj.adapters.sql_common import SqlRunner, make_engine
from ssbj.config import Database, load_config
from ssbj.contracts import TableName
from ssbj.core.costmodel import StepCost, calibrate
from ssbj.errors import (
    CheckpointError,
    ConfigError,
    DependencyError,
    InputError,
    ServiceError,
    SSBJError,
    StateError,
    TerminalError,
    TransientError,
)
from ssbj.pipeline.quality import load_result
from ssbj.pipeline.quickstart import write_demo
from ssbj.retry import RetryPolicy

log = logging.getLogger("ssbj.test")


def _errors() -> list[type[BaseException]]:
    found = [c for _, c in inspect.getmembers(ssbj.errors, inspect.isclass) if issubclass(c, BaseException)]
    return [*found, KafkaSourceError]


def test_every_error_is_transient_xor_terminal() -> None:
    for cls in _errors():
        assert issubclass(cls, SSBJError), cls
        if cls in (SSBJError, TransientError, TerminalError):
            continue
        assert issubclass(cls, TransientError) != issubclass(cls, TerminalError), cls


def test_no_module_defines_an_error_outside_the_tree() -> None:
    import pkgutil

    import ssbj

    outside = []
    for mod in pkgutil.walk_packages(ssbj.__path__, "ssbj."):
        if mod.name.startswith(("ssbj.bench", "ssbj.testing")):
            continue  # tools, not the library
        module = __import__(mod.name, fromlist=["_"])
        for name, cls in inspect.getmembers(module, inspect.isclass):
            mine = cls.__module__ == mod.name and not name.startswith("_")
            if mine and issubclass(cls, Exception) and not issubclass(cls, SSBJError):
                outside.append(f"{mod.name}.{name}")
    assert outside == []


# ---------------------------------------------------------------- which class, for real calls
# Config errors only for a value of the job file, an option or an argument, named where it was
# given; stored state, checkpoints, data, services and missing extras get their own classes.


def _job_file(tmp_path: Path, trigger_mode: str | None = None) -> Path:
    job = write_demo(tmp_path, customers=20, orders=20, files=1)
    if trigger_mode is not None:  # the job file as data, one field changed
        doc = yaml.safe_load(job.read_text())
        doc["trigger"]["mode"] = trigger_mode
        job.write_text(yaml.safe_dump(doc))
    return job


def test_config_errors_name_the_field_or_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job_file(tmp_path, trigger_mode="sometimes")
    with pytest.raises(ConfigError, match=r"trigger\.mode"):
        load_config(job)
    with pytest.raises(ConfigError, match=r"schema\.table"):
        TableName.parse("a.b.c")
    monkeypatch.delenv("SSBJ_NO_SUCH_URL", raising=False)
    with pytest.raises(ConfigError, match=r"SSBJ_NO_SUCH_URL \(url_env\)"):
        credentials.engine(Database.model_validate({"url_env": "SSBJ_NO_SUCH_URL"}))
    with pytest.raises(ConfigError, match="bulk"):
        SqlTableSink(f"sqlite:///{tmp_path / 'w.db'}", "t", bulk="fast")
    with pytest.raises(ConfigError, match="not a database URL"):
        make_engine("no url at all")


def test_stored_state_that_does_not_fit_is_a_state_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    schema = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.string())])
    with pytest.raises(StateError, match="before prepare"):
        SqlTableSink(url, "out").write(0, 0, schema.empty_table())
    SqlTableSink(url, "out").prepare(schema)
    with pytest.raises(StateError, match="lacks column"):
        SqlTableSink(url, "out").prepare(schema.append(pa.field("extra", pa.int32())))
    with pytest.raises(StateError, match="does not exist"):
        SqlTableSink(url, "absent", create=False).prepare(schema)
    ParquetDirSink(tmp_path / "pq").prepare(schema)
    with pytest.raises(StateError, match="changed"):
        ParquetDirSink(tmp_path / "pq").prepare(pa.schema([pa.field("k", pa.int32()), pa.field("v", pa.string())]))
    cfg = load_config(_job_file(tmp_path / "job"))
    with pytest.raises(StateError, match="has not been checked"):
        load_result(cfg, "never-ran")
    assert not issubclass(StateError, ConfigError)


def test_checkpoint_layouts_are_checkpoint_errors() -> None:
    with pytest.raises(CheckpointError, match="master layout"):
        decode_value({"t": "int", "v": "not an int"})


def test_unusable_data_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="got 2"):
        calibrate([(StepCost(b=10, w_n=1, w_s=1, n_out=1), 1e-6)] * 2)
    sink = SqlTableSink(f"sqlite:///{tmp_path / 'w.db'}", "lists")
    with pytest.raises(InputError, match="cannot store"):
        sink.prepare(pa.schema([pa.field("l", pa.list_(pa.int64()))]))


def test_services_that_fail_for_good_are_service_errors(tmp_path: Path) -> None:
    # SQLite cannot open a file in a directory that does not exist: no retry will change that
    with pytest.raises(ServiceError, match="reflecting the master table"):
        SqlMasterScan(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}", "customer", "k", 10)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ServiceError, match="cannot create sink directory"):
        ParquetDirSink(blocker / "out").prepare(pa.schema([pa.field("k", pa.int64())]))


def test_a_missing_driver_is_a_dependency_error() -> None:
    with pytest.raises(DependencyError, match="cannot create an engine"):
        make_engine("mysql+nosuchdriver://etl@db1/crm")


def test_a_locked_database_is_transient_and_retried(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (k INTEGER)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        eng, _ = make_engine(f"sqlite:///{path}?timeout=0.05")
        runner = SqlRunner(eng, RetryPolicy(attempts=2, initial_backoff=0.01, max_backoff=0.01), "test", log)
        with pytest.raises(TransientError, match=r"failed 2 times.*database is locked"):
            runner.run(lambda conn: conn.exec_driver_sql("SELECT COUNT(*) FROM t").scalar_one(), "count")
        eng.dispose()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
