"""``join.exchange: read`` on ``local-cluster[2,1,1024]``: the shards read the batch's Kafka records themselves.

The demo's orders (JSON lines, skewed keys, NULL and unmatched keys, malformed lines) are
produced to a 2-partition Tansu topic; P = 2 shards read each micro-batch's offset ranges
in their own tasks. Checked against a plain batch join of the landed lines as a multiset,
with every dead letter once: (1) a clean run, whose shards after the first batch must run
where their operator is resident (the tasks' preferred executor), and whose re-run adds
nothing; (2) a run whose shards' Python workers are SIGKILLed at the processor's crash
points (Spark retries the task; the shard restores from its checkpoint).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pipeline_reference import expected_join, warehouse_rows

from ssbj.config import parse_config
from ssbj.pipeline.quickstart import write_demo
from ssbj.testing.kafka import TansuBroker

pytestmark = [pytest.mark.slow, pytest.mark.services]

SSBJ = [sys.executable, "-m", "ssbj.cli"]

# runs the job in its own local-cluster session and writes every progress record (the test's Spark is local[2])
RUNNER = """
import json, sys
from ssbj.config import parse_config
from ssbj.pipeline.job import EnrichmentJob, spark_session
import yaml
cfg = parse_config(yaml.safe_load(open(sys.argv[1])), sys.argv[1])
progress = []
EnrichmentJob(cfg, spark=spark_session(cfg), on_progress=progress.append).run()
json.dump(progress, open(sys.argv[2], "w"), default=float)
"""


def _job(root: Path, broker: TansuBroker, topic: str) -> Path:
    job = write_demo(root, customers=3_000, orders=24_000, files=8, seed=5)
    lines = [ln.encode() for f in sorted((root / "landing").glob("*.jsonl")) for ln in f.read_text().splitlines() if ln]
    broker.create_topic(topic, partitions=2)
    assert broker.produce(topic, lines) == len(lines)
    cfg = yaml.safe_load(job.read_text())
    cfg["source"] = {
        "kind": "kafka",
        "bootstrap_servers": broker.bootstrap,
        "topic": topic,
        "max_offsets_per_trigger": 6_000,
        "reader_options": {"pollTimeoutMs": "800"},
    }
    cfg["join"].update({"placement": "executors", "shards": 2, "exchange": "read", "step_rows": 1_000})
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


def _check(root: Path) -> None:
    expected, _, bad = expected_join(root / "landing", root / "master.db")
    assert warehouse_rows(root / "warehouse.db", "orders_enriched") == expected
    with sqlite3.connect(root / "warehouse.db") as db:
        positions = [p for (p,) in db.execute("SELECT position FROM orders_dead_letters")]
    assert len(positions) == len(set(positions)) == bad  # every dead letter once


def _run(job: Path, out: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    res = subprocess.run(
        [sys.executable, "-c", RUNNER, str(job), str(out)], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    progress: list[dict[str, Any]] = json.loads(out.read_text())
    return progress


def test_shards_reading_kafka_are_exact_and_run_where_their_state_is(kafka_broker: TansuBroker, tmp_path: Path) -> None:
    job = _job(tmp_path, kafka_broker, "orders-read")
    progress = _run(job, tmp_path / "p1.json", _env(tmp_path))
    _check(tmp_path)
    batches = [p for p in progress if p["event"] == "batch"]
    assert len(batches) >= 3 and all(p["shards"] == 2 for p in progress)
    later = [s for p in progress[1:] for s in p["per_shard"]]
    assert all(s["resident"] for s in later), [(p["batch_id"], p["per_shard"]) for p in progress]
    again = _run(job, tmp_path / "p2.json", _env(tmp_path))  # nothing new: changes nothing
    assert sum(p["records_in"] for p in again) == 0
    _check(tmp_path)


def test_shard_workers_killed_while_reading_kafka_lose_and_duplicate_nothing(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    job = _job(tmp_path, kafka_broker, "orders-read-kill")
    res = subprocess.run(
        [*SSBJ, "run", "--config", str(job), "--quiet"],
        env=_env(tmp_path, "after-sink:1,in-checkpoint:2,after-decode:3"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    fired = sorted(p.name for p in (tmp_path / "once").iterdir())
    assert fired == ["after-decode-3", "after-sink-1", "in-checkpoint-2"]  # every kill happened
    _check(tmp_path)
