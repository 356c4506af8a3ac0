"""The join in the executors on ``local-cluster[2,1,1024]``: SIGKILL of Python workers, of an executor JVM and
of the driver at random points; after the restarts the warehouse holds exactly the batch join.

Python workers die at the processor's crash points (``SSBJ_CRASH_AT``, each point once per
job through ``SSBJ_CRASH_ONCE``): Spark retries the shard's task, which restores the shard
from its checkpoint (and, after ``after-sink``, replaces what the dead attempt wrote). An
executor JVM is killed while batches run (its worker starts a new one; the lost tasks run
again), then the driver's whole process group, at a random moment; ``ssbj run`` is started
again on the same checkpoint and finishes the input.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from pipeline_reference import expected_join, warehouse_rows

from ssbj.config import parse_config
from ssbj.pipeline.quickstart import write_demo

pytestmark = pytest.mark.slow  # local-cluster start-up ~20 s per run

SSBJ = [sys.executable, "-m", "ssbj.cli"]


def _job(root: Path) -> Path:
    job = write_demo(root, customers=3_000, orders=24_000, files=8, seed=5)
    cfg = yaml.safe_load(job.read_text())
    cfg["source"]["max_files_per_trigger"] = 1
    cfg["join"].update({"placement": "executors", "shards": 2})
    cfg["spark"] = {"master": "local-cluster[2,1,1024]", "conf": {"spark.task.maxFailures": "4"}}
    job.write_text(yaml.safe_dump(cfg, sort_keys=False))
    parse_config(cfg, str(job))
    return job


def _env(root: Path, crash: str | None = None) -> dict[str, str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env.pop("SSBJ_CRASH_AT", None)
    if crash:
        (root / "once").mkdir(exist_ok=True)
        env.update(SSBJ_CRASH_AT=crash, SSBJ_CRASH_ONCE=str(root / "once"))
    return env


def _run(job: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [*SSBJ, "run", "--config", str(job), "--quiet"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _check(root: Path) -> None:
    expected, _, bad = expected_join(root / "landing", root / "master.db")
    got = warehouse_rows(root / "warehouse.db", "orders_enriched")
    assert sum(got.values()) == sum(expected.values())
    assert got == expected
    with sqlite3.connect(root / "warehouse.db") as db:
        positions = [p for (p,) in db.execute("SELECT position FROM orders_dead_letters")]
    assert len(positions) == len(set(positions)) == bad  # every dead letter once


def _progress(root: Path) -> int:
    try:
        return int(json.loads((root / "checkpoint" / "last_progress.json").read_text())["batch_id"])
    except (OSError, ValueError, KeyError):
        return -1


def test_python_workers_killed_inside_shard_tasks(tmp_path: Path) -> None:
    job = _job(tmp_path)
    res = _run(job, _env(tmp_path, "after-sink:1,in-checkpoint:2,after-decode:4"))
    assert res.returncode == 0, res.stderr[-3000:]
    fired = sorted(p.name for p in (tmp_path / "once").iterdir())
    assert fired == ["after-decode-4", "after-sink-1", "in-checkpoint-2"]  # every kill happened
    _check(tmp_path)


def test_executor_jvm_and_driver_killed_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("SSBJ_FAULT_SEED", "11")))
    job = _job(tmp_path)
    cmd = [*SSBJ, "run", "--config", str(job), "--quiet"]
    log = tmp_path / "run1.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=_env(tmp_path), start_new_session=True, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 300
        while _progress(tmp_path) < 1 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before the faults"
        time.sleep(rng.uniform(0, 1.5))
        jvms = subprocess.run(
            ["pgrep", "-s", str(proc.pid), "-f", "CoarseGrainedExecutorBackend"], capture_output=True, text=True
        ).stdout.split()
        assert jvms, "no executor JVM found"
        os.kill(int(rng.choice(jvms)), signal.SIGKILL)
        seen = _progress(tmp_path)
        while _progress(tmp_path) <= seen and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(rng.uniform(0, 2.0))
        assert proc.poll() is None, "the run ended before the driver was killed: " + log.read_text()[-3000:]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    res = _run(job, _env(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    _check(tmp_path)
    res = _run(job, _env(tmp_path))  # nothing new: changes nothing
    assert res.returncode == 0, res.stderr[-3000:]
    _check(tmp_path)
