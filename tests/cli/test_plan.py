"""``ssbj plan`` and the bound in ``ssbj join --stats``, checked against an independent computation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from reference import bound_n as reference_n

from ssbj.cli import main


def _files(tmp_path: Path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    n = 5_000
    mk = rng.integers(0, n, n)
    p = 1 / np.arange(1, n + 1)
    sk = rng.permutation(n)[rng.choice(n, 60_000, p=p / p.sum())]
    master = pa.table({"mk": mk, "attr": rng.integers(0, 9, n)})
    stream = pa.table({"sid": np.arange(len(sk)), "sk": sk, "x": rng.integers(0, 9, len(sk))})
    s, m = tmp_path / "s.parquet", tmp_path / "m.parquet"
    pq.write_table(stream, s)
    pq.write_table(master, m)
    return s, m, sk, mk


def test_plan_prints_the_bound_of_the_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s, m, sk, mk = _files(tmp_path)
    args = ["plan", "--stream", str(s), "--master", str(m), "--stream-key", "sk", "--master-key", "mk"]
    assert main([*args, "--memory", "20kB", "--json", "--target-rate", "1e6"]) == 0
    rep = json.loads(capsys.readouterr().out)
    vals, counts = np.unique(sk, return_counts=True)
    mv, mc = np.unique(mk, return_counts=True)
    mcount = dict(zip(mv.tolist(), mc.tolist(), strict=True))
    ref = reference_n(counts / counts.sum(), np.array([mcount.get(v, 0) for v in vals]), 20_000, rep["v_s"], rep["v_r"])
    assert rep["bound"]["n_ssbj"] == pytest.approx(ref, rel=1e-6)
    assert rep["bound"]["ratio"] > 1
    assert 0 < rep["bound"]["cache_share"] <= 1
    assert rep["recommended_budget"] is None or rep["recommended_budget"] > 0
    assert main([*args, "--memory", "20kB"]) == 0
    assert "memory-optimal bound" in capsys.readouterr().out


def test_join_stats_report_bound_and_efficiency(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s, m, _, _ = _files(tmp_path)
    out = tmp_path / "o.parquet"
    argv = ["join", "--stream", str(s), "--master", str(m), "--stream-key", "sk", "--master-key", "mk"]
    assert main([*argv, "--out", str(out), "--memory", "40kB", "--stats", "--batch-rows", "2000"]) == 0
    rep = json.loads(capsys.readouterr().out)
    b = rep["bound"]
    assert b["sampled_stream_rows"] == 60_000
    assert b["achieved_tuples_per_r_cycle"] > 0
    assert b["efficiency"] == pytest.approx(b["achieved_ratio"] / b["bound"]["ratio"])


def test_plan_partitions_are_those_join_uses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``ssbj plan`` plans as ``ssbj join`` does (its in-memory master is read in pieces)."""
    s, m, _, _ = _files(tmp_path)
    files = ["--stream", str(s), "--master", str(m), "--stream-key", "sk", "--master-key", "mk", "--memory", "40kB"]
    assert main(["plan", *files, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    out = tmp_path / "o.parquet"
    assert main(["join", *files, "--out", str(out), "--stats", "--batch-rows", "2000"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert plan["partitions"] == run["memory_plan"]["k"]
    assert plan["partition_rows"] == run["memory_plan"]["b"]


def test_memory_as_a_share_of_r(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--memory 40%`` is 40% of R's projected bytes (rows x v_R), in plan and join alike."""
    s, m, _, mk = _files(tmp_path)
    files = ["--stream", str(s), "--master", str(m), "--stream-key", "sk", "--master-key", "mk"]
    assert main(["plan", *files, "--memory", "40%", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["memory_bytes"] == int(0.4 * len(mk) * rep["v_r"])
    out = tmp_path / "o.parquet"
    assert main(["join", *files, "--out", str(out), "--memory", "40%", "--stats", "--batch-rows", "2000"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["budget_bytes"] == rep["memory_bytes"]


@pytest.mark.parametrize("text", ["%", "0%", "-1%", "x%", "nan%", "inf%", "1e-9%"])
def test_memory_share_rejects(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    s, m, _, _ = _files(tmp_path)
    files = ["--stream", str(s), "--master", str(m), "--stream-key", "sk", "--master-key", "mk"]
    assert main(["plan", *files, f"--memory={text}"]) != 0
    err = capsys.readouterr().err
    assert f"bad --memory value {text!r}" in err or ("--memory" in err and "is less than one byte" in err)
