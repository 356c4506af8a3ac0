"""The services of a run, all from :mod:`ssbj.testing`: MariaDB, a Tansu broker, and one Spark session."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

from ssbj.bench.pipeline.spec import JDBC_JAR
from ssbj.testing import mariadb as testdb
from ssbj.testing.kafka import TansuBroker

log = logging.getLogger("ssbj.bench.pipeline")


class Database:
    """A throw-away MariaDB (:func:`ssbj.testing.mariadb.launch`) sized for the run."""

    def __init__(self, base: Path, buffer_pool: str) -> None:
        self.server = testdb.launch(base)
        self.port = self.server.port
        self.password = testdb.PASSWORD
        try:
            self.settings = self._tune(buffer_pool)
        except BaseException:
            self.server.stop()
            raise

    def _tune(self, buffer_pool: str) -> dict[str, str]:
        # the test server starts with a 256M buffer pool; these are dynamic in MariaDB >= 10.9
        want = {
            "innodb_buffer_pool_size": buffer_pool,
            "innodb_log_file_size": "256M",
            "max_allowed_packet": "268435456",
            "max_connections": "500",
            "local_infile": "ON",
        }
        conn = self.root()
        applied: dict[str, str] = {}
        with conn.cursor() as cur:
            for name, value in want.items():
                size = _bytes(value)
                try:
                    cur.execute(f"SET GLOBAL {name} = %s", (size if size is not None else value,))
                except Exception as exc:  # an older server: the run goes on with the test server's value
                    log.warning("could not set %s: %s", name, exc)
                cur.execute("SELECT @@GLOBAL." + name)
                applied[name] = str(cur.fetchone()[0])
        conn.close()
        return applied

    @property
    def pid(self) -> int | None:
        """Return mariadbd's process id (from its pid file)."""
        try:
            return int(self.server.pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def root(self, database: str | None = None, **kw: Any) -> Any:
        """Open a PyMySQL connection as root (autocommit)."""
        import pymysql  # type: ignore[import-untyped]

        return pymysql.connect(
            host="127.0.0.1", port=self.port, user="root", password="", database=database, autocommit=True, **kw
        )

    def user(self) -> Any:
        """Open a PyMySQL connection as the benchmark user to its database (autocommit)."""
        import pymysql

        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user=testdb.USER,
            password=self.password,
            database=testdb.DATABASE,
            autocommit=True,
        )

    @property
    def sa_url(self) -> str:
        """SQLAlchemy URL without the password (the job config reads it from PASSWORD_ENV)."""
        return f"mysql+pymysql://{testdb.USER}@127.0.0.1:{self.port}/{testdb.DATABASE}"

    @property
    def sa_url_full(self) -> Any:
        """SQLAlchemy URL with the password (for the benchmark's own sinks)."""
        return self.server.url

    @property
    def jdbc_url(self) -> str:
        """JDBC URL for Spark."""
        # jdbc:mysql:// with the MariaDB driver; jdbc:mariadb:// makes Spark pick no MySQL dialect
        return f"jdbc:mysql://127.0.0.1:{self.port}/{testdb.DATABASE}"

    @property
    def user_name(self) -> str:
        """The benchmark user."""
        return testdb.USER

    @property
    def name(self) -> str:
        """The benchmark database."""
        return testdb.DATABASE

    def stop(self) -> None:
        """Shut the server down."""
        self.server.stop()


def _bytes(v: str) -> int | None:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if v[-1:] in units and v[:-1].isdigit():
        return int(v[:-1]) * units[v[-1]]
    return int(v) if v.isdigit() else None


class DirectTansu(TansuBroker):
    """The test broker without its outage proxy: clients talk to Tansu directly.

    The proxy pumps every byte through Python threads of this process, which would be measured
    as the pipeline's cost; a benchmark simulates no outage, so it advertises the broker itself.
    """

    def launch(self, timeout: float = 20.0) -> None:
        """Start the broker on its own port, advertised as the bootstrap address."""
        import subprocess

        self.bootstrap = self.direct_bootstrap
        url = f"tcp://127.0.0.1:{self.broker_port}"
        cmd = [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url]
        cmd += ["--storage-engine", "memory://tansu/"]
        with open(self.log_path, "ab") as out:
            self._proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603 - the Tansu binary
        self.wait_ready(timeout)

    @property
    def pid(self) -> int | None:
        """The broker's process id."""
        return self._proc.pid if self._proc is not None else None


def make_spark(master: str = "local[2]") -> Any:
    """One session for every method (``local[2]`` by default), with the MariaDB JDBC driver on the class path.

    On ``local-cluster[N,C,M]`` the executors are separate JVMs with their own Python workers
    (the environment, PYTHONPATH included, is inherited from the driver).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:
        raise RuntimeError("a Spark session is already active; the benchmark needs its own (spark.jars)")
    if not Path(JDBC_JAR).exists():
        raise FileNotFoundError(f"{JDBC_JAR} not found (Debian: apt-get install libmariadb-java)")
    spark = (
        SparkSession.builder.master(master)
        .config("spark.executorEnv.PYSPARK_PYTHON", os.environ["PYSPARK_PYTHON"])
        .appName("ssbj-pipeline-bench")
        .config("spark.jars", JDBC_JAR)
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stop_spark(spark: Any) -> None:
    """Stop the session, whatever state it is in."""
    with contextlib.suppress(Exception):
        spark.stop()
