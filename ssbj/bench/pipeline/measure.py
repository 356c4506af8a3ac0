# ruff: noqa: S608 - SQL text is built from the benchmark's own table names and %s placeholders only
"""What a run measures besides time: DB status counters, RSS per process, and the staleness probe."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ssbj.bench.pipeline.spec import NEW_SEGMENT, SEGMENTS, Json
from ssbj.core.operator import StepResult

STATUS_VARS = (
    "Com_select",
    "Rows_read",
    "Rows_sent",
    "Handler_read_key",
    "Handler_read_next",
    "Handler_read_rnd_next",
    "Questions",
    "Bytes_sent",
    "Com_insert",
    "Com_delete",
    "Com_update",
)
"""MariaDB 10.11 has no Innodb_rows_read; Rows_read counts the rows every statement read (all engines)."""


class DbCounters:
    """``SHOW GLOBAL STATUS`` deltas on a dedicated root connection (SHOW is not a Com_select)."""

    def __init__(self, db: Any) -> None:
        self.conn = db.root()

    def snapshot(self) -> dict[str, int]:
        """Return the current values of STATUS_VARS."""
        with self.conn.cursor() as cur:
            names = ",".join(f"'{v}'" for v in STATUS_VARS)
            cur.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")
            return {k: int(v) for k, v in cur.fetchall()}

    @staticmethod
    def delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        """Return b - a per variable."""
        return {k: b[k] - a[k] for k in STATUS_VARS}

    @staticmethod
    def report(before: dict[str, int], after: dict[str, int], tuples: int) -> Json:
        """Return the deltas of one run, with rows read and round trips per stream tuple."""
        d = DbCounters.delta(before, after)
        return {
            "com_select": d["Com_select"],
            "rows_read": d["Rows_read"],
            "rows_read_per_tuple": d["Rows_read"] / tuples if tuples else None,
            "rows_sent": d["Rows_sent"],
            "handler_read_key": d["Handler_read_key"],
            "handler_read_next": d["Handler_read_next"],
            "handler_read_rnd_next": d["Handler_read_rnd_next"],
            "round_trips_per_1k_tuples": 1000 * d["Com_select"] / tuples if tuples else None,
            "questions": d["Questions"],
            "questions_per_1k_tuples": 1000 * d["Questions"] / tuples if tuples else None,
            "bytes_sent": d["Bytes_sent"],
            "com_insert": d["Com_insert"],
            "com_delete": d["Com_delete"],
            "com_update": d["Com_update"],
        }


def rss(pid: int) -> int:
    """Resident set size of ``pid`` in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = [int(x) for x in f.read().split()]
                out.extend(kids)
                todo.extend(kids)
        except OSError:
            continue
    return out


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


class RssSampler:
    """Samples RSS every ``interval`` s: the driver, the Spark JVM with its Python workers, and each service.

    ``per_process`` keeps the peak of every process seen, keyed ``role:pid`` (driver, jvm,
    python_worker, mariadbd, tansu), so a run reports peak memory per process, not only sums.
    """

    def __init__(self, jvm_pid: int | None, services: dict[str, int | None] | None = None, interval: float = 0.2):
        self.jvm_pid = jvm_pid
        self.services = {k: v for k, v in (services or {}).items() if v}
        self.interval = interval
        self._stop = threading.Event()
        self.driver_peak = 0
        self.jvm_tree_peak = 0
        self.per_process: dict[str, int] = {}
        self.driver_start = rss(os.getpid())
        self._t = threading.Thread(target=self._run, daemon=True)

    def _note(self, key: str, value: int) -> None:
        if value > self.per_process.get(key, 0):
            self.per_process[key] = value

    def _sample(self) -> None:
        me = rss(os.getpid())
        self.driver_peak = max(self.driver_peak, me)
        self._note(f"driver:{os.getpid()}", me)
        if self.jvm_pid:
            kids = descendants(self.jvm_pid)
            values = {p: rss(p) for p in [self.jvm_pid, *kids]}
            self.jvm_tree_peak = max(self.jvm_tree_peak, sum(values.values()))
            for p, v in values.items():
                if p == self.jvm_pid:
                    self._note(f"jvm:{p}", v)
                elif "python" in _comm(p):  # not the short-lived helpers a JVM forks (chmod, readlink, ...)
                    self._note(f"python_worker:{p}", v)
        for role, p in self.services.items():
            self._note(f"{role}:{p}", rss(p) if p else 0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> RssSampler:
        self._sample()
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self._sample()

    def result(self) -> Json:
        """Peaks in bytes: the old sums, and per process."""
        return {
            "driver_python_rss_peak": self.driver_peak,
            "driver_python_rss_growth": self.driver_peak - self.driver_start,
            "spark_jvm_and_workers_rss_peak": self.jvm_tree_peak,
            "rss_peak_per_process": dict(sorted(self.per_process.items())),
        }


@dataclass
class Staleness:
    """When the hot customers were updated, and when each batch finished (for the stale window)."""

    hot: list[int]
    threshold: int  # update once this many tuples were consumed
    update_after_batch: int | None = None
    update_position: int | None = None  # stream tuples consumed at the update (= first order_id after it)
    update_time: float | None = None
    batch_done: dict[tuple[int, int], float] = field(default_factory=dict)

    def maybe_update(self, db: Any, consumed: int, last_batch: int) -> None:
        """Update the hot customers once ``consumed`` reaches the threshold (call between micro-batches)."""
        if self.update_time is not None or consumed < self.threshold:
            return
        conn = db.root(db.name)
        with conn.cursor() as cur:
            marks = ",".join(["%s"] * len(self.hot))
            sql = f"UPDATE customer SET c_segment = %s WHERE c_custkey IN ({marks})"
            cur.execute(sql, (NEW_SEGMENT, *self.hot))
        conn.close()
        self.update_time = time.monotonic()
        self.update_after_batch = last_batch
        self.update_position = consumed


def restore_hot(db: Any, hot: list[int]) -> None:
    """Give the hot customers their generated c_segment back."""
    conn = db.root(db.name)
    with conn.cursor() as cur:
        marks = ",".join(["%s"] * len(hot))
        seg = ", ".join(f"'{s}'" for s in SEGMENTS)
        sql = f"UPDATE customer SET c_segment = ELT(1 + MOD(c_custkey, 5), {seg}) WHERE c_custkey IN ({marks})"
        cur.execute(sql, hot)  # constants and placeholders only
    conn.close()


class PartitionReadCounter:
    """Counts master partition reads, rows and seconds (a StepObserver of the job's processor)."""

    def __init__(self, on_first: Callable[[], None] | None = None) -> None:
        self.calls = 0
        self.rows = 0
        self.seconds = 0.0
        self.on_first = on_first

    def on_step(self, result: StepResult) -> None:
        """Ignore steps (StepRecorder counts them)."""

    def before_partition_read(self, partition: int) -> None:
        """Call ``on_first`` before the first read."""
        if self.calls == 0 and self.on_first is not None:
            self.on_first()

    def after_partition_read(self, partition: int, rows: int, seconds: float) -> None:
        """Count one read."""
        self.seconds += seconds
        self.calls += 1
        self.rows += rows


class StepRecorder:
    """Per operator step (a StepObserver): memory, and stale rows emitted after the update.

    ``row_id`` is the output column naming the master row (customer_id in case a, c_custkey in b).
    """

    def __init__(self, st: Staleness, row_id: str) -> None:
        self.st = st
        self.row_id = row_id
        self.hot = pa.array(st.hot, pa.int64())
        self.steps = 0
        self.mem_peak = 0
        self.mem_peak_components: Json | None = None
        self.steps_after_update = 0
        self.tuples_after_update = 0  # stream tuples the operator's steps read since the update
        self.tuples_first_r_cycle: int | None = None  # ... during the first K steps after it
        self.r_cycle_at_update: int | None = None
        self.partitions: int | None = None
        self.stale_steps: list[Json] = []

    def on_step(self, result: StepResult) -> None:
        """Record one operator step."""
        m = result.metrics
        self.steps += 1
        self.partitions = m.partitions
        total = m.memory.total
        if total > self.mem_peak:
            self.mem_peak = total
            self.mem_peak_components = m.memory.to_dict()
        if self.st.update_time is None:
            return
        self.steps_after_update += 1
        self.tuples_after_update += m.w
        if self.steps_after_update == m.partitions:
            self.tuples_first_r_cycle = self.tuples_after_update
        if self.r_cycle_at_update is None:
            self.r_cycle_at_update = m.r_cycle
        e = result.enriched
        if e.num_rows == 0:
            return
        mask = pc.and_(
            pc.is_in(e.column(self.row_id), value_set=self.hot), pc.not_equal(e.column("c_segment"), NEW_SEGMENT)
        )
        n = int(pc.sum(mask).as_py() or 0)
        if n:
            stale = e.filter(mask)
            self.stale_steps.append(
                {
                    "partition_reads_since_update": self.steps_after_update,
                    "tuples_since_update": self.tuples_after_update,
                    "seconds_since_update": time.monotonic() - self.st.update_time,
                    "rows": n,
                    "max_order_id": int(pc.max(stale.column("order_id")).as_py()),
                    "r_cycle": m.r_cycle,
                    "partition": m.partition,
                }
            )

    def before_partition_read(self, partition: int) -> None:
        """Ignore reads (PartitionReadCounter counts them)."""

    def after_partition_read(self, partition: int, rows: int, seconds: float) -> None:
        """Ignore reads (PartitionReadCounter counts them)."""

    def result(self) -> Json:
        """Return the stale window in operator steps (= master partition reads)."""
        out: Json = {
            "partitions_k": self.partitions,
            "r_cycle_at_update": self.r_cycle_at_update,
            "partition_reads_after_update": self.steps_after_update,
            "tuples_read_by_steps_after_update": self.tuples_after_update,
            "tuples_in_first_r_cycle_after_update": self.tuples_first_r_cycle,
            "steps_emitting_stale_rows": len(self.stale_steps),
        }
        if self.stale_steps:
            last = self.stale_steps[-1]
            out["last_stale_step"] = last
            out["stale_window_partition_reads"] = last["partition_reads_since_update"]
            out["stale_window_tuples"] = last["tuples_since_update"]
            out["stale_window_seconds"] = last["seconds_since_update"]
            if self.partitions:
                out["stale_window_r_cycles"] = last["partition_reads_since_update"] / self.partitions
                out["within_one_r_cycle"] = last["partition_reads_since_update"] <= self.partitions
        else:
            out["stale_window_partition_reads"] = 0
            out["stale_window_tuples"] = 0
            out["stale_window_seconds"] = 0.0
            out["stale_window_r_cycles"] = 0.0
            out["within_one_r_cycle"] = True
        return out
