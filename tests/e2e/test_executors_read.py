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
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from executors_cluster import SSBJ, check_warehouse, crash_env, executors_job

from ssbj.testing.kafka import TansuBroker

pytestmark = [pytest.mark.slow, pytest.mark.services]

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
    def from_kafka(cfg: dict[str, Any]) -> None:
        cfg["source"] = {
            "kind": "kafka",
            "bootstrap_servers": broker.bootstrap,
            "topic": topic,
            "max_offsets_per_trigger": 6_000,
            "reader_options": {"pollTimeoutMs": "800"},
        }
        cfg["join"].update({"exchange": "read", "step_rows": 1_000})

    job = executors_job(root, from_kafka)
    lines = [ln.encode() for f in sorted((root / "landing").glob("*.jsonl")) for ln in f.read_text().splitlines() if ln]
    broker.create_topic(topic, partitions=2)
    assert broker.produce(topic, lines) == len(lines)
    return job


def _run(job: Path, out: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    res = subprocess.run(
        [sys.executable, "-c", RUNNER, str(job), str(out)], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    progress: list[dict[str, Any]] = json.loads(out.read_text())
    return progress


def test_shards_reading_kafka_are_exact_and_run_where_their_state_is(kafka_broker: TansuBroker, tmp_path: Path) -> None:
    job = _job(tmp_path, kafka_broker, "orders-read")
    progress = _run(job, tmp_path / "p1.json", crash_env(tmp_path))
    check_warehouse(tmp_path)
    batches = [p for p in progress if p["event"] == "batch"]
    assert len(batches) >= 3 and all(p["shards"] == 2 for p in progress)
    later = [s for p in progress[1:] for s in p["per_shard"]]
    assert all(s["resident"] for s in later), [(p["batch_id"], p["per_shard"]) for p in progress]
    again = _run(job, tmp_path / "p2.json", crash_env(tmp_path))  # nothing new: changes nothing
    assert sum(p["records_in"] for p in again) == 0
    check_warehouse(tmp_path)


def test_shard_workers_killed_while_reading_kafka_lose_and_duplicate_nothing(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    job = _job(tmp_path, kafka_broker, "orders-read-kill")
    res = subprocess.run(
        [*SSBJ, "run", "--config", str(job), "--quiet"],
        env=crash_env(tmp_path, "after-sink:1,in-checkpoint:2,after-decode:3"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    fired = sorted(p.name for p in (tmp_path / "once").iterdir())
    assert fired == ["after-decode-3", "after-sink-1", "in-checkpoint-2"]  # every kill happened
    check_warehouse(tmp_path)
