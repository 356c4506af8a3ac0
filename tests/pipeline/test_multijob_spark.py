"""The shared application on a local Spark session with a processing-time trigger: two sources, idle drain."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from multijob_cases import expected, job_config, land, output, write_masters

from ssbj.pipeline.multijob import MultiJob


def test_processing_time_two_sources_idle_drain_each_job_exact(spark: Any, tmp_path: Path) -> None:
    write_masters(tmp_path)
    (tmp_path / "orders").mkdir()
    (tmp_path / "clicks").mkdir()
    trig = {"mode": "processing-time", "interval": "1 second", "idle_drain_seconds": 2}
    cfgs = [job_config(tmp_path, n, trigger=trig) for n in "abc"]
    job = MultiJob(cfgs, tmp_path / "app", spark=spark)
    runner = threading.Thread(target=job.run)
    runner.start()
    orders, clicks = [], []
    try:
        for f in range(3):
            orders.append(land(tmp_path, "orders", f, 120))
            clicks.append(land(tmp_path, "clicks", f, 80))
            time.sleep(1.0)
        want = {"a": expected(tmp_path, "a", orders)[0], "b": expected(tmp_path, "b", orders)[0]}
        want["c"] = expected(tmp_path, "c", clicks)[0]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(output(tmp_path, n) != w for n, w in want.items()):
            time.sleep(1)
    finally:
        job.stop()
        runner.join(120)
    for n, w in want.items():
        assert output(tmp_path, n) == w, n
    assert all(c.waiting == 0 and c.reconciled for c in job.processor.counts().values())
