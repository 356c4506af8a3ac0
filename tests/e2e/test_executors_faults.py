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
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from executors_cluster import SSBJ, check_warehouse, crash_env, executors_job

pytestmark = pytest.mark.slow  # local-cluster start-up ~20 s per run


def _job(root: Path) -> Path:
    def one_file_a_batch(cfg: dict[str, Any]) -> None:
        cfg["source"]["max_files_per_trigger"] = 1

    return executors_job(root, one_file_a_batch)


def _run(job: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [*SSBJ, "run", "--config", str(job), "--quiet"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _progress(root: Path) -> int:
    try:
        return int(json.loads((root / "checkpoint" / "last_progress.json").read_text())["batch_id"])
    except (OSError, ValueError, KeyError):
        return -1


def test_python_workers_killed_inside_shard_tasks(tmp_path: Path) -> None:
    job = _job(tmp_path)
    res = _run(job, crash_env(tmp_path, "after-sink:1,in-checkpoint:2,after-decode:4"))
    assert res.returncode == 0, res.stderr[-3000:]
    fired = sorted(p.name for p in (tmp_path / "once").iterdir())
    assert fired == ["after-decode-4", "after-sink-1", "in-checkpoint-2"]  # every kill happened
    check_warehouse(tmp_path)


def test_executor_jvm_and_driver_killed_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("SSBJ_FAULT_SEED", "11")))
    job = _job(tmp_path)
    cmd = [*SSBJ, "run", "--config", str(job), "--quiet"]
    log = tmp_path / "run1.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=crash_env(tmp_path), start_new_session=True, stdout=out, stderr=out)
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
    res = _run(job, crash_env(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    check_warehouse(tmp_path)
    res = _run(job, crash_env(tmp_path))  # nothing new: changes nothing
    assert res.returncode == 0, res.stderr[-3000:]
    check_warehouse(tmp_path)
