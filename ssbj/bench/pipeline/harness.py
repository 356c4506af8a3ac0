"""The harness every method runs on: services, data, the job config, counters, and one result type.

A method is a module ``m_<name>.py`` with a ``METHOD`` object that has ``name``, ``label``,
``shards`` (the P it can run) and ``run(harness) -> MethodResult`` (see :class:`Method`);
:mod:`ssbj.bench.pipeline.registry` lists the modules.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from ssbj.bench.pipeline import checks
from ssbj.bench.pipeline.data import Data, generate, load_master, produce_orders
from ssbj.bench.pipeline.measure import DbCounters, RssSampler, Staleness, restore_hot
from ssbj.bench.pipeline.services import Database, DirectTansu, make_spark, stop_spark
from ssbj.bench.pipeline.spec import CASES, PASSWORD_ENV, TOPIC, TOPIC_PARTITIONS, Case, Json, Scale
from ssbj.bench.pipeline.timeline import Timeline
from ssbj.config import parse_config
from ssbj.pipeline.job import EnrichmentJob
from ssbj.units import parse_size

log = logging.getLogger("ssbj.bench.pipeline")


@dataclass
class MethodResult:
    """Everything measured for one method."""

    method: str
    label: str
    tuples: int = 0
    wall_seconds: float = 0.0
    setup_seconds: float = 0.0
    tuples_per_second: float = 0.0
    join_service_rate: float | None = None
    phase_seconds: dict[str, float] = field(default_factory=dict)
    memory: Json = field(default_factory=dict)
    db: Json = field(default_factory=dict)
    correctness: Json = field(default_factory=dict)
    staleness: Json = field(default_factory=dict)
    details: Json = field(default_factory=dict)
    timeline: Json = field(default_factory=dict)


class Method(Protocol):
    """One way to enrich the topic: a module's ``METHOD``."""

    name: str
    label: str

    def supports_shards(self, shards: int) -> str | None:
        """None if the method can run with ``shards`` parallel join shards, else why not."""
        ...

    def run(self, h: Harness) -> MethodResult:
        """Enrich the whole topic into the warehouse table ``wh_<name>`` and measure it."""
        ...


class Unsupported(Exception):
    """The method cannot run this variant (e.g. P > 1); recorded, not a failure of the others."""


class TimedOut(Exception):
    """The method's streaming query was stopped at the run's time limit (recorded as an error)."""


T = TypeVar("T")


def _started(x: T | None) -> T:
    if x is None:
        raise RuntimeError("Harness.start() has not run")
    return x


class Harness:
    """Holds the services, the Spark session and the data; methods run on it one after another."""

    def __init__(self, scale: Scale, scale_name: str, case: Case, workdir: Path, seed: int) -> None:
        self.scale = scale
        self.scale_name = scale_name
        self.case = case
        self.workdir = workdir
        self.seed = seed
        self.topic = TOPIC
        self.memory: str = scale.budgets()[0]  # the budget of the methods run next
        self.shards = 1  # P of the methods run next
        self.method_timeout: float | None = None  # seconds a foreachBatch method may run before it is stopped
        self.spark_master = "local[2]"
        self._db: Database | None = None
        self._broker: DirectTansu | None = None
        self.spark: Any = None
        self._data: Data | None = None
        self.setup: Json = {}
        self._counters: DbCounters | None = None
        self.jvm_pid: int | None = None

    @property
    def db(self) -> Database:
        """The MariaDB server (after :meth:`start`)."""
        return _started(self._db)

    @property
    def broker(self) -> DirectTansu:
        """The Tansu broker (after :meth:`start`)."""
        return _started(self._broker)

    @property
    def data(self) -> Data:
        """The generated data (after :meth:`start`)."""
        return _started(self._data)

    @property
    def counters(self) -> DbCounters:
        """The status-counter connection (after :meth:`start`)."""
        return _started(self._counters)

    def memory_bytes(self) -> int:
        """Return the current budget in bytes ("1%" is 1% of R's Arrow size: rows x Arrow bytes per row)."""
        if self.memory.endswith("%"):
            share = float(self.memory[:-1]) / 100
            return max(1, int(share * self.scale.master_rows * self.data.master_row_bytes))
        return parse_size(self.memory, "memory")

    # ------------------------------------------------------------------ setup / teardown
    def start(self) -> None:
        """Generate the data, start MariaDB and Tansu, load and produce, start Spark, warm up."""
        t0 = time.perf_counter()
        self._data = generate(self.scale, self.case, self.seed)
        self.setup["generate_seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self._db = Database(self.workdir / "mariadb", self.scale.buffer_pool)
        self.setup["mariadb_start_seconds"] = time.perf_counter() - t0
        os.environ[PASSWORD_ENV] = self.db.password
        self.setup["master_load_seconds"] = load_master(self.db, self.data, self.workdir)
        log.info("master loaded: %d rows in %.1f s", self.scale.master_rows, self.setup["master_load_seconds"])
        self._broker = DirectTansu(self.workdir)
        t0 = time.perf_counter()
        self.broker.launch()
        self.broker.create_topic(self.topic, TOPIC_PARTITIONS)
        self.setup["tansu_start_seconds"] = time.perf_counter() - t0
        self.setup["produce_seconds"] = produce_orders(self.broker.bootstrap, self.topic, self.data, self.case)
        log.info("produced %d orders in %.1f s", self.scale.tuples, self.setup["produce_seconds"])
        t0 = time.perf_counter()
        self.spark = make_spark(self.spark_master)
        self.setup["spark_start_seconds"] = time.perf_counter() - t0
        try:
            self.jvm_pid = int(self.spark.sparkContext._gateway.proc.pid)
        except Exception:
            self.jvm_pid = None
        self._counters = DbCounters(self.db)
        if self.scale.warm_up:
            t0 = time.perf_counter()
            self.warm_up()
            self.setup["warm_up_seconds"] = time.perf_counter() - t0

    def warm_up(self) -> None:
        """Run a small ssbj job once on the driver and once in the executors, unmeasured.

        Warms Spark's Python workers (the shards' pool included), the Kafka source, numba kernels, sinks.
        """
        n_cust, n_orders = 2_000, 4_000
        rng = np.random.default_rng(0)
        case = CASES["a"]
        warm = Data(
            n_cust,
            rng.uniform(0, 100, n_cust + 1).round(2),
            rng.integers(1, n_cust + 100, n_orders),
            np.ones(n_orders),
            [],
            50.0,
        )
        load_master(self.db, warm, self.workdir, table="customer_warm")
        self.broker.create_topic("warmup", TOPIC_PARTITIONS)
        produce_orders(self.broker.bootstrap, "warmup", warm, case)
        cfg = self.job_config("ssbj", "wh_warmup", topic="warmup", master="customer_warm", batch=1_000, case=case)
        cfg["checkpoint"] = str(self.workdir / "ck-warmup")
        EnrichmentJob(parse_config(cfg, "warm-up"), spark=self.spark).run()
        # and the executors' pools of shard workers (ssbj_exec), one shard per core
        self.drop("wh_warmup", "wh_warmup_dead")
        cfg["join"].update({"placement": "executors", "shards": int(self.spark.sparkContext.defaultParallelism)})
        cfg["checkpoint"] = str(self.workdir / "ck-warmup-exec")
        EnrichmentJob(parse_config(cfg, "warm-up executors"), spark=self.spark).run()
        self.drop("wh_warmup", "wh_warmup_dead")  # and the shards reading Kafka themselves (ssbj_exec_read)
        cfg["join"]["exchange"] = "read"
        cfg["checkpoint"] = str(self.workdir / "ck-warmup-exec-read")
        EnrichmentJob(parse_config(cfg, "warm-up executors, read"), spark=self.spark).run()
        self.drop("wh_warmup", "wh_warmup_dead", "customer_warm")

    def stop(self) -> None:
        """Stop Spark, the broker and the database."""
        if self.spark is not None:
            stop_spark(self.spark)
            self.spark = None
        if self._counters is not None:
            self._counters.conn.close()
        if self._broker is not None:
            self._broker.close()
        if self._db is not None:
            self._db.stop()

    # ------------------------------------------------------------------ pieces the methods share
    def job_config(
        self,
        algorithm: str,
        table: str,
        topic: str | None = None,
        master: str = "customer",
        batch: int | None = None,
        case: Case | None = None,
    ) -> Json:
        """Return the job configuration (a dict, as a YAML file would give) of one method."""
        url = self.db.sa_url
        case = case or self.case
        return {
            "name": f"bench-{algorithm}",
            "source": {
                "kind": "kafka",
                "bootstrap_servers": self.broker.bootstrap,
                "topic": topic or self.topic,
                "reader": "python",
                "starting_offsets": "earliest",
                "max_offsets_per_trigger": batch or self.scale.batch,
            },
            "schema": dict(case.stream_schema),
            "master": {
                "url": url,
                "password_env": PASSWORD_ENV,
                "table": master,
                "key": case.master_key,
                "columns": list(case.master_columns),
            },
            "join": {
                "stream_key": case.stream_key,
                "algorithm": algorithm,
                "type": "inner",
                "memory": self.memory_bytes(),
            },
            "sink": {"kind": "database", "url": url, "password_env": PASSWORD_ENV, "table": table},
            "dead_letter": {"kind": "database", "url": url, "password_env": PASSWORD_ENV, "table": f"{table}_dead"},
            "trigger": {"mode": "available-now"},
            "checkpoint": str(self.workdir / f"ck-{table}"),
            "spark": {"master": self.spark_master},
        }

    def fresh(self, table: str, *extra: str) -> Path:
        """Drop a method's warehouse tables and checkpoint, restore the hot customers; returns the checkpoint dir."""
        self.drop(table, *extra)
        ck = self.workdir / f"ck-{table}"
        shutil.rmtree(ck, ignore_errors=True)
        restore_hot(self.db, self.data.hot_keys)
        return ck

    def drop(self, *tables: str) -> None:
        """Drop tables if they exist."""
        conn = self.db.root(self.db.name)
        with conn.cursor() as cur:
            for t in tables:
                cur.execute(f"DROP TABLE IF EXISTS `{t}`")
        conn.close()

    def staleness(self) -> Staleness:
        """Return a staleness probe that updates the hot customers once half of the stream was consumed."""
        return Staleness(self.data.hot_keys, threshold=self.scale.tuples // 2)

    def rss(self) -> RssSampler:
        """Return an RSS sampler over the driver, the Spark JVM with its workers, MariaDB and Tansu."""
        return RssSampler(self.jvm_pid, {"mariadbd": self.db.pid, "tansu": self.broker.pid})

    def timeline(self) -> Timeline:
        """Return a fresh per-phase timeline."""
        return Timeline()

    def deadline(self) -> float | None:
        """Return the ``time.monotonic()`` at which a method starting now is out of time (None: no limit).

        Spark cannot stop a query inside a running ``foreachBatch``; a method whose batch
        can run for minutes (a lookup join on a cold cache) checks this itself and returns early.
        """
        return None if self.method_timeout is None else time.monotonic() + self.method_timeout

    def await_query(self, query: Any, name: str, consumed: Callable[[], int]) -> None:
        """Wait for an available-now query; stop it at ``method_timeout`` and raise :class:`TimedOut`."""
        if self.method_timeout is None:
            query.awaitTermination()
            return
        if not query.awaitTermination(self.method_timeout):
            query.stop()
            n = consumed()
            raise TimedOut(
                f"{name}: stopped after {self.method_timeout:g} s with {n:,} of {self.scale.tuples:,} tuples "
                f"({n / self.method_timeout:,.0f} tuples/s)"
            )

    def check(self, table: str, tuples: int, dead_table: str | None = None) -> Json:
        """Compare the warehouse table with the batch join computed from the generated data."""
        return checks.check(self.db, self.case, self.data, self.scale.tuples, table, tuples, dead_table)

    def stale_report(self, table: str, st: Staleness, exact: Json | None = None) -> Json:
        """How long enriched rows of the updated customers kept the old value (see :func:`checks.stale_report`)."""
        return checks.stale_report(self.db, self.case, self.scale.tuples, table, st, exact)
