"""The hybrid experiment end to end on a tiny SQLite master: counts, decisions, same output."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssbj.bench.exp_hybrid import Size, markdown, run_database
from ssbj.bench.experiments import EXPERIMENTS


@pytest.mark.slow
def test_hybrid_experiment_counts_and_output(tmp_path: Path) -> None:
    # partitions of 5,000 rows: a one-key lookup (~1-2 ms through SQLAlchemy, the join
    # included) must be clearly cheaper than a read (~10 ms); at 500 rows the two were within
    # 1.5x on a slow host, and the measured choice a coin toss (CI of 102f3f1)
    res = run_database(f"sqlite:///{tmp_path / 'm.sqlite'}", Size(20_000, 4, (1, 1_000), 1), 0, lambda s: None)
    assert res["partitions"] == 4 and res["partition_rows"] == 5_000
    slow, fast = res["points"][0], res["points"][1]
    for pt in res["points"]:
        assert pt["exact_across_modes"]  # off, auto (fitted or measured) and always produce the same rows
        off = pt["runs"]["off"]
        # scan only: one partition of b rows and one round trip per step, whatever arrives
        assert off["db_rows_per_tuple"] == pytest.approx(5_000 / pt["tuples_per_step"], rel=0.02)
        assert off["round_trips_per_tuple"] == pytest.approx(1 / pt["tuples_per_step"])
        assert pt["runs"]["always"]["paths"].get("scan", 0) == 0
    # one tuple per step: the lookup reads about two rows (two per key) instead of b
    assert slow["auto_lookup_share"] > 0.9
    # given no constants, auto measures both paths (the losing one is retried) and takes the lookup
    assert set(slow["runs"]["auto_measured"]["paths"]) >= {"scan", "lookup"}
    assert slow["measured_lookup_share"] > 0.9
    assert slow["runs"]["always"]["db_rows_per_tuple"] < 3
    assert "| meshjoin | 1 |" in markdown({"sqlite": res})
    # about 950 distinct keys among 1,000 arrivals per step (over 11,000 keys), in IN lists of
    # at most lookup_batch keys: one list a step at 4,000 (two at 500); never a round trip per key
    lists = max(1, -(-950 // res["lookup_batch"]))
    assert fast["runs"]["always"]["round_trips_per_tuple"] == pytest.approx(lists / 1_000)
    assert "hybrid" in EXPERIMENTS
