"""The bound experiment with R in SQLite: the table as written, the read costs, one small run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from ssbj.bench.datagen import synthetic_master
from ssbj.bench.exp_bound import efficiency_factors
from ssbj.bench.exp_bound_sql import SqlMaster, exp_bound_sql, read_costs, write_table
from ssbj.bench.harness import Bench
from ssbj.bench.presets import PRESETS


def _rows(t) -> Counter:  # type: ignore[no-untyped-def]
    return Counter(zip(*(t.column(n).to_pylist() for n in ("mk", "attr", "mpayload")), strict=True))


def test_every_master_row_is_read_once_over_the_partitions(tmp_path: Path) -> None:
    master = synthetic_master(5_003, seed=3, payload_bytes=20)
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'm.sqlite'}")
    try:
        write_table(engine, master, "master", "mid")
        factory = SqlMaster(engine, "master", "mk", ("mk", "attr", "mpayload"))
        scan = factory(700)
        try:
            assert scan.num_partitions() == 8
            read: Counter = Counter()
            for p in range(scan.num_partitions()):
                read += _rows(scan.read_partition(p))
        finally:
            scan.close()
        assert read == _rows(master)
        per_query, per_row = read_costs(factory, master.num_rows)
        assert per_query >= 0 and per_row >= 0
        assert per_query + per_row > 0
    finally:
        engine.dispose()


def test_a_small_run_reports_the_bound_and_its_factors(tmp_path: Path) -> None:
    preset = PRESETS["small"]
    bench = Bench(preset, tmp_path, log=lambda _: None).derived(r_main=20_000, bound_mem_fracs=(0.1,))
    res = exp_bound_sql(bench)
    assert res["master"] == "sqlite"
    assert not (tmp_path / "bound-master.sqlite").exists()  # removed after the run
    # timed (a difference of two read times, clamped at 0): only its presence is checked here;
    # read_costs' own test checks that the two costs are not both 0
    assert res["read_cost_ns"]["per_row"] >= 0 and res["read_cost_ns"]["per_query"] >= 0
    assert res["v_r_read"] > 0
    (pt,) = res["points"]
    assert "error" not in pt
    for algo in ("ssbj", "meshjoin"):
        assert pt[algo]["measured_tuples"] > 0
        assert pt[algo]["partitions"] == pt["ssbj"]["partitions"]  # the same b for both
        assert pt[algo]["memory_max_over_budget"] <= 1.05
    assert pt["disk_chunk_rows"] is None  # a SQL master does not stream pieces
    f = efficiency_factors(pt)
    assert f is not None
    # each algorithm against its own N of the structural solve; MESHJOIN at SSBJ's w under a budget
    assert pt["ssbj_vs_structural_n"] > 0
    assert pt["meshjoin_vs_structural_n"] > 0
    budgeted = pt["meshjoin_same_w_budgeted"]
    scale = pt["ssbj"]["w_per_step"] / pt["meshjoin"]["w_per_step"]
    assert budgeted["memory_budget"] == int(pt["budget"] * scale)
    assert pt["c_loop_ratio_same_w_budgeted"] > 0
    assert f["structures"] * f["memory_use"] * f["r_cycle_time"] == pytest.approx(pt["efficiency"])
