"""Both Spark hostings of shard state on local-cluster[2,1,1024]: exact under task retries, a dead worker, a replay.

One subprocess (its own JVM, see shard_scenarios.py) runs every scenario; the tests read its report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    pytest.importorskip("pyspark")
    script = Path(__file__).with_name("shard_scenarios.py")
    env = {**os.environ, "PYTHONPATH": str(script.parents[1])}  # tests/: the shared oracles (reference.py)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, check=False, env=env
    )
    # the Python traceback, if any, then the end of the JVM's log (local-cluster's shutdown is noisy)
    trace = done.stderr[done.stderr.rfind("Traceback") :][:4000] if "Traceback" in done.stderr else ""
    assert done.returncode == 0, trace + "\n...\n" + done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_resident_hosting_is_exact_under_retry_worker_loss_and_replay(report: dict[str, Any]) -> None:
    r = report["resident"]
    assert r["exact"], (r["rows"], report["expected_rows"])
    ev = r["events"]
    # the injected failures ran after their checkpoints; the retries restored the checkpoint before the batch
    assert {(e["batch_id"], e["shard"], e["attempt"]) for e in ev} >= {(1, 0, 0), (1, 0, 1), (2, 1, 0), (2, 1, 1)}
    retried = [e for e in ev if e["attempt"] == 1 and (e["batch_id"], e["shard"]) in {(1, 0), (2, 1)}]
    assert [e["source"] for e in retried] == ["replay", "replay"]
    # the replayed last batch: both shards rolled back to the checkpoint before it
    last = [e for e in ev if e["batch_id"] == 3]
    assert sorted(e["source"] for e in last)[-2:] == ["replay", "replay"]
    # every shard ran in every batch (heartbeats), once per attempt
    assert {(e["batch_id"], e["shard"]) for e in ev} == {(b, s) for b in range(5) for s in range(2)}


def test_statestore_hosting_is_exact_under_a_task_retry(report: dict[str, Any]) -> None:
    r = report["statestore"]
    assert r["error"] is None
    assert r["exact"], (r["rows"], report["expected_rows"])
    ev = r["events"]
    first = [e for e in ev if (e["batch_id"], e["shard"]) == (1, 1)]
    assert sorted(e["attempt"] for e in first) == [0, 1]
    # both attempts started from the state Spark committed for batch 0, not from the failed attempt's update
    assert {e["source"] for e in first} == {"state"}
    assert [e["state_batches"] for e in first] == [2, 2]  # batch 0's state plus this batch, in both attempts
    a0, a1 = sorted(first, key=lambda e: e["attempt"])
    assert (a0["rows"], a0["out"], a0["steps"]) == (a1["rows"], a1["out"], a1["steps"])
    # the packed states differ at most by the text of the busy-seconds counter in the manifest
    assert abs(a0["state_bytes"] - a1["state_bytes"]) < 64


def test_statestore_hosting_is_exact_when_spark_replays_a_batch(report: dict[str, Any]) -> None:
    r = report["statestore_replay"]
    assert r["error"] is None
    assert r["exact"], (r["rows"], report["expected_rows"])
    runs = [e for e in r["events"] if e["batch_id"] == 1]
    assert len(runs) == 4  # two shards, batch 1 run by the first query and again by the restarted one
    for shard in (0, 1):
        first, again = [e for e in runs if e["shard"] == shard]
        # the replay started from the state committed for batch 0, and redid the same work
        assert first["state_batches"] == again["state_batches"] == 2
        assert (first["rows"], first["out"], first["steps"]) == (again["rows"], again["out"], again["steps"])
        assert abs(first["state_bytes"] - again["state_bytes"]) < 64  # the busy-seconds counter's text
