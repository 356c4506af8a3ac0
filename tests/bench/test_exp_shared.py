"""The shared-jobs benchmark at a tiny scale: both runs exact against DuckDB, ratios present."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssbj.bench.exp_shared import Scale, exp_shared_jobs, main


def test_tiny_run_is_exact(tmp_path: Path) -> None:
    s = Scale(customers=3000, products=1000, suppliers=500, tuples=3000, batch=1000, partition_rows=500)
    res = exp_shared_jobs(tmp_path, s, reps=1, log=lambda _m: None)
    for n in ("5", "10"):
        entry = res["sets"][n]
        assert entry["all_exact"], entry["exact"]
        assert len(entry["exact"]["shared"]) == int(n)
        assert len(entry["exact"]["shared_pooled"]) == int(n)
        # pooled: a scan's disk buffer takes b rows for each job on its master
        per_master = {g[0]: len(g[2]) for g in entry["shared"]["scan_groups"]}
        assert entry["shared"]["partition_rows"] == {m: 500 for m in per_master}
        assert entry["shared_pooled"]["partition_rows"] == {m: 500 * n_jobs for m, n_jobs in per_master.items()}
        # three masters: three shared scans however many jobs
        assert len(entry["shared"]["scan_groups"]) == 3
        assert entry["shared"]["master_rows_read"] < entry["isolated"]["master_rows_read"]
        counts = entry["shared"]["counts"]
        assert all(c["waiting"] == 0 and c["tuples_in"] == c["matched"] + c["unmatched"] for c in counts.values())


@pytest.mark.slow  # the command's warm-up builds the full-size master tables (~12 s)
def test_main_writes_ratios(tmp_path: Path) -> None:
    out = tmp_path / "out"
    rc = main(
        ["--only", "jobs", "--tuples", "2000", "--job-reps", "1", "--out", str(out), "--work", str(tmp_path / "w")]
    )
    assert rc == 0
    import json

    doc = json.loads((out / "results.json").read_text())
    r = doc["ratios"]["shared/isolated"]
    assert r["throughput"] > 0 and r["memory"] > 0
    assert doc["commands"]["jobs"].startswith("python -m ssbj.bench.exp_shared")
