"""Smoke tests of the benchmark: the data generator's shape and one tiny experiment end to end.

Only structure is checked here, never timings (the machine is small and noisy).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ssbj.bench import cli
from ssbj.bench.datagen import SyntheticStream, generate_synthetic, key_stats
from ssbj.core import CostConstants


def _top_share(keys: np.ndarray) -> float:
    _, counts = np.unique(keys, return_counts=True)
    return float(counts.max() / len(keys))


def test_synthetic_shape() -> None:
    stream, master = generate_synthetic(5_000, 50_000, 1.0, seed=3, stream_payload_bytes=8, master_payload_bytes=24)
    assert stream.column_names == ["sid", "sk", "payload"]
    assert master.column_names == ["mid", "mk", "attr", "mpayload"]
    assert stream.schema.field("payload").type == pa.binary(8)
    assert master.schema.field("mpayload").type == pa.binary(24)
    assert stream.num_rows == 50_000 and master.num_rows == 5_000

    mid = master.column("mid").to_numpy()
    assert len(np.unique(mid)) == len(mid)  # primary key
    mk = master.column("mk").to_numpy()
    assert len(np.unique(mk)) < len(mk)  # join values repeat in R
    assert mk.min() >= 0 and mk.max() < 5_000
    sk = stream.column("sk").to_numpy()
    assert not np.isin(sk, mk).all()  # some stream tuples have no master row
    assert np.isin(sk, mk).any()

    stats = key_stats(stream, master, "sk", "mk")
    assert stats["master_duplicate_rows"] > 0
    assert 0 < stats["stream_unmatched_share"] < 1


def test_skew_orders_top_key_and_is_deterministic() -> None:
    uniform, _ = generate_synthetic(10_000, 100_000, 0.0, seed=1)
    skewed, _ = generate_synthetic(10_000, 100_000, 1.0, seed=1)
    assert _top_share(skewed.column("sk").to_numpy()) > 5 * _top_share(uniform.column("sk").to_numpy())
    again, _ = generate_synthetic(10_000, 100_000, 1.0, seed=1)
    assert again.equals(skewed)


def test_drift_changes_the_hot_set() -> None:
    stream, _ = generate_synthetic(10_000, 100_000, 1.0, seed=2, drift_at=0.5)
    sk = stream.column("sk").to_numpy()
    first = np.bincount(sk[:50_000], minlength=10_000)
    second = np.bincount(sk[50_000:], minlength=10_000)
    assert first.argmax() != second.argmax()


def test_stream_segments_continue() -> None:
    src = SyntheticStream(1_000, 0.5, seed=4, segment_rows=100)
    a, b = src.segment(0), src.segment(1)
    assert a.column("sid").to_pylist() == list(range(100))
    assert b.column("sid").to_pylist() == list(range(100, 200))
    assert src.segment(1).equals(b)


def test_bench_cli_runs_one_experiment(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    calib = tmp_path / "calibration.json"
    args = parser.parse_args(
        ["--scale", "small", "--only", "fig5a", "--out", str(tmp_path), "--save-calibration", str(calib)]
    )
    assert cli.run(args) == 0
    assert CostConstants.load(calib).c_fixed >= 0  # the per-machine constants, for ssbj join --calibration

    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["scale"] == "small"
    assert doc["command"]
    for key in ("nproc", "python", "versions", "platform"):
        assert key in doc["machine"]
    assert {"numpy", "pyarrow", "numba"} <= set(doc["machine"]["versions"])
    exps = doc["experiments"]
    assert set(exps) == {"fig5a", "calibration"}
    assert "constants_ns" in exps["calibration"]

    points = exps["fig5a"]["points"]
    assert len(points) >= 2
    measured = [p for p in points if "error" not in p]
    assert measured
    for pt in measured:
        assert 0 < pt["memory_fraction"] <= 0.1
        for algo in ("ssbj", "meshjoin"):
            run = pt[algo]
            assert run["algorithm"] == algo
            for key in ("service_rate", "e2e_rate_cpu", "cache_share", "memory_mean", "measured_tuples"):
                assert isinstance(run[key], int | float)
            assert run["measured_tuples"] > 0
            assert 0.0 <= run["cache_share"] <= 1.0
        assert pt["meshjoin"]["cache_share"] == 0.0
        assert pt["ratio_service_rate"] is None or pt["ratio_service_rate"] > 0

    targets = doc["summary"]["targets"]
    assert "ssbj_vs_meshjoin_skew1_mem1pct" in targets
    assert targets["ssbj_vs_meshjoin_skew1_mem1pct"]["status"]
    assert (tmp_path / "fig5a.png").stat().st_size > 0
    report = (tmp_path / "README.md").read_text()
    assert "ssbj bench --scale small" in report and "| fig5a |" in report


def test_unknown_experiment_is_rejected() -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--only", "nope"])
