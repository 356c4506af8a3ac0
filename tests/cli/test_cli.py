"""Tests of the ``ssbj`` command line (join, demo, bench delegation)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from cli_cases import (
    MASTER_COLS,
    OUT_COLS,
    STREAM_COLS,
    check_reconciles,
    join_args,
    make_tables,
    run_stats,
    write_csv,
    write_parquet,
)
from reference import as_multiset, batch_join
from sliced_calls import count_sliced_calls

from ssbj.cli import main, parse_size
from ssbj.errors import ConfigError


# ---------------------------------------------------------------------- join: results
@pytest.mark.parametrize("algorithm", ["ssbj", "meshjoin"])
@pytest.mark.parametrize("key_type", ["int", "string"])
def test_join_parquet_matches_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], algorithm: str, key_type: str
) -> None:
    stream, master = make_tables(key_type)
    s, m = write_parquet(tmp_path, stream, master)
    out = tmp_path / "out.parquet"
    report = run_stats(capsys, [*join_args(s, m, out, "--stats"), "--algorithm", algorithm])
    result = pq.read_table(out)
    assert result.column_names == OUT_COLS
    assert as_multiset(result) == batch_join(stream, master, "sk", "mk", MASTER_COLS)
    check_reconciles(report, out)
    assert report["memory_plan"]["k"] > 1
    assert report["totals"]["null_keys"] == sum(1 for k in stream.column("sk").to_pylist() if k is None)
    if algorithm == "ssbj":
        assert report["totals"]["served_by_cache"] > 0  # the hot keys were cached
    else:
        assert report["totals"]["served_by_cache"] == 0


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_join_csv_matches_reference(tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    stream, master = make_tables()
    s, m = tmp_path / f"stream{suffix}", tmp_path / f"master{suffix}"
    write_csv(s, stream)
    write_csv(m, master)
    # the reference joins the tables as CSV reading types them
    stream_t, master_t = pacsv.read_csv(s), pacsv.read_csv(m)
    assert stream_t.column("sk").null_count > 0
    out = tmp_path / "out.parquet"
    report = run_stats(capsys, join_args(s, m, out, "--stats"))
    result = pq.read_table(out)
    assert result.column_names == OUT_COLS
    assert as_multiset(result) == batch_join(stream_t, master_t, "sk", "mk", MASTER_COLS)
    check_reconciles(report, out)


def test_join_mixed_formats_and_batching(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stream, master = make_tables(n_stream=2500)
    s = tmp_path / "stream.csv"
    write_csv(s, stream)
    m = tmp_path / "master.parquet"
    pq.write_table(master, m)
    out = tmp_path / "out.parquet"
    argv = [*join_args(s, m, out), "--batch-rows", "1", "--memory", "1MiB"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "enriched rows" in lines[0]  # the one-line summary
    assert as_multiset(pq.read_table(out)) == batch_join(stream, master, "sk", "mk", MASTER_COLS)


def test_master_columns_projection_and_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stream, master = make_tables(n_stream=3000)
    s, m = write_parquet(tmp_path, stream, master)
    out = tmp_path / "out.parquet"
    report = run_stats(capsys, join_args(s, m, out, "--stats", "--master-columns", " mname , mid"))
    result = pq.read_table(out)
    assert result.column_names == [*STREAM_COLS, "mname", "mid"]  # stream first, then as given
    assert as_multiset(result) == batch_join(stream, master, "sk", "mk", ["mname", "mid"])
    check_reconciles(report, out)


def test_master_columns_without_key_and_with_collision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stream, master = make_tables(n_stream=2000)
    s, m = write_parquet(tmp_path, stream, master)
    out = tmp_path / "out.parquet"
    assert main(join_args(s, m, out, "--master-columns", "attr")) == 0
    capsys.readouterr()
    result = pq.read_table(out)
    assert result.column_names == [*STREAM_COLS, "attr_master"]
    assert as_multiset(result) == batch_join(stream, master, "sk", "mk", ["attr"])


def test_empty_stream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stream, master = make_tables(n_stream=2000)
    s, m = write_parquet(tmp_path, stream.slice(0, 0), master)
    out = tmp_path / "out.parquet"
    report = run_stats(capsys, join_args(s, m, out, "--stats"))
    assert report["rows_written"] == 0 and report["totals"]["tuples_in"] == 0
    assert pq.read_table(out).column_names == OUT_COLS


def test_stats_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stream, master = make_tables()
    s, m = write_parquet(tmp_path, stream, master)
    out = tmp_path / "out.parquet"
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"c_fixed": 100000.0, "c_o": 100.0}))
    report = run_stats(capsys, join_args(s, m, out, "--stats", "--calibration", str(cal)))
    plan = report["memory_plan"]
    assert plan["budget_bytes"] == 12_000
    assert plan["b"] * plan["k"] >= master.num_rows
    assert plan["chunk_bytes"] > 0 and plan["predicted_service_rate"] > 0
    mem = report["memory"]
    assert set(mem["end"]) == set(mem["peak"]) >= {"h_s", "h_r", "disk_buffer", "key_table", "total"}
    assert all(mem["peak"][k] >= mem["end"][k] for k in mem["end"] if k != "entries")
    c_loop = report["c_loop"]
    assert c_loop["steps"] == report["totals"]["steps"]
    ratio = c_loop["ratio_measured_over_predicted"]
    assert ratio["mean"] > 0 and ratio["median"] > 0
    check_reconciles(report, out)


@pytest.mark.parametrize(
    ("flags", "fsm", "unique"),
    [
        ((), "pipelined", True),
        (("--switching", "paper", "--no-unique-key-switch", "--no-early-eviction"), "paper", False),
    ],
)
def test_join_switching_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], fsm: str, unique: bool
) -> None:
    stream, master = make_tables()
    master = master.take([*range(300), 350])  # a unique key (and one NULL): the master vouches for it
    s, m = write_parquet(tmp_path, stream, master)
    out = tmp_path / "out.parquet"
    report = run_stats(capsys, [*join_args(s, m, out, "--stats"), *flags])
    assert report["switching"] == {"fsm": fsm, "unique_key": unique, "early_eviction": not flags}
    assert as_multiset(pq.read_table(out)) == batch_join(stream, master, "sk", "mk", MASTER_COLS)
    check_reconciles(report, out)
    assert report["totals"]["served_by_cache"] > 0


def test_join_threads_with_all_of_r_in_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # all of R fits in 100 kB, H_S's ring holds a few thousand tuples: R-cycles enough for the
    # cache to become complete from the third, the file replayed with a full step waiting
    stream, master = make_tables(n_stream=20_000)
    s, m = write_parquet(tmp_path, stream, master)
    out = tmp_path / "out.parquet"
    sliced = count_sliced_calls(monkeypatch, 16)  # this stream's steps are split
    args = join_args(s, m, out, "--stats", "--memory", "100kB", "--batch-rows", "100", "--threads", "2")
    report = run_stats(capsys, args)
    assert report["threads"] == 2
    assert sliced.count > 0  # the complete cache ran, its calls in slices
    assert as_multiset(pq.read_table(out)) == batch_join(stream, master, "sk", "mk", MASTER_COLS)
    check_reconciles(report, out)
    assert main(join_args(s, m, out, "--threads", "0")) != 0
    assert "--threads must be >= 1" in capsys.readouterr().err


def test_subprocess_module_entry(tmp_path: Path) -> None:
    stream, master = make_tables(n_stream=2000)
    s, m = write_parquet(tmp_path, stream, master)
    out = tmp_path / "out.parquet"
    cmd = [sys.executable, "-m", "ssbj.cli", *join_args(s, m, out, "--stats")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    check_reconciles(json.loads(proc.stdout), out)
    assert as_multiset(pq.read_table(out)) == batch_join(stream, master, "sk", "mk", MASTER_COLS)

    bad = [sys.executable, "-m", "ssbj.cli", *join_args(s, m, out), "--stream-key", "nope"]
    proc = subprocess.run(bad, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("ssbj: error: ")
    assert "Traceback" not in proc.stderr and "'nope'" in proc.stderr


# ---------------------------------------------------------------------- sizes
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64MB", 64_000_000),
        ("64mb", 64_000_000),
        ("64M", 64_000_000),
        ("1.5GiB", 1_610_612_736),
        ("500kB", 500_000),
        ("500KiB", 512_000),
        ("2 MiB", 2_097_152),
        ("1048576", 1_048_576),
        ("100B", 100),
        ("1TB", 10**12),
        (".5kB", 500),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "64XB", "-1", "0", "0.1B", "1e6", "64 M B", "nan"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="--memory"):
        parse_size(text)


# ---------------------------------------------------------------------- demo
def test_demo(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "demo",
        "--rows",
        "30000",
        "--master-rows",
        "3000",
        "--memory",
        "150kB",
        "--cycles",
        "3",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "check: both algorithms produced" in out
    assert "service rate SSBJ / MESHJOIN" in out
    lines = out.splitlines()
    ssbj_line = next(line for line in lines if line.startswith("ssbj ") and "enriched" in line)
    mesh_line = next(line for line in lines if line.startswith("meshjoin ") and "enriched" in line)
    assert "unmatched" in ssbj_line and "cache share" in ssbj_line and "service rate" in ssbj_line
    assert ssbj_line.split()[2] == mesh_line.split()[2]  # same enriched count
    assert sum("R-cycle" in line for line in lines) >= 4
    assert any("per-value" in line for line in lines)  # the FSM state of every R-cycle (JoinSpec.switching)


def test_demo_single_algorithm_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "demo",
        "--rows",
        "5000",
        "--master-rows",
        "500",
        "--memory",
        "64kB",
        "--algorithm",
        "meshjoin",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "meshjoin" in out and "SSBJ / MESHJOIN" not in out
    assert main(["demo", "--rows", "0"]) == 2
    assert main(["demo", "--memory", "lots"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("ssbj: error: ") for line in err)


# ---------------------------------------------------------------------- bench
def test_bench_delegates(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[Any] = []
    fake = types.ModuleType("ssbj.bench.cli")

    def add_arguments(parser: Any) -> None:
        parser.add_argument("--quick", action="store_true")
        parser.add_argument("--out", default="bench/results")

    def run(args: Any) -> int:
        seen.append(args)
        return 0

    fake.add_arguments = add_arguments  # type: ignore[attr-defined]
    fake.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ssbj.bench.cli", fake)
    assert main(["bench", "--quick", "--out", "x"]) == 0
    assert seen[0].quick is True and seen[0].out == "x"
    assert main(["bench", "--help"]) == 0
    assert "--quick" in capsys.readouterr().out
    assert main(["bench", "--bogus"]) == 2
    assert capsys.readouterr().err.startswith("ssbj: error: unrecognized arguments: --bogus")


def test_bench_unavailable(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ssbj.bench.cli", None)
    assert main(["bench"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ssbj[bench]" in err


def test_help_and_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "join" in capsys.readouterr().out
    assert main(["join", "--help"]) == 0
    assert "powers of 1024" in capsys.readouterr().out
    assert main([]) == 2
    assert main(["join", "--stream", "a", "--extra"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("ssbj: error: ") for line in err)


def test_csv_type_change_mid_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CSV whose later blocks do not fit the types inferred from the first one."""
    import ssbj.files as files

    monkeypatch.setattr(files, "CSV_BLOCK_BYTES", 1024)
    s = tmp_path / "stream.csv"
    rows = ["sid,sk,x"] + [f"{i},{i % 7}," for i in range(300)] + [f"{i},{i % 7},oops" for i in range(300)]
    s.write_text("\n".join(rows) + "\n")
    _, master = make_tables(n_stream=10)
    m = tmp_path / "master.parquet"
    pq.write_table(master, m)
    out = tmp_path / "out.parquet"
    assert main(join_args(s, m, out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ssbj: error: cannot read stream file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["master.parquet", "stream.csv"]


def test_help_and_module_docstring_list_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    import ssbj.cli as cli_module

    parser = cli_module.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands = set(sub.choices)
    assert {"join", "demo", "bench", "run", "validate", "quickstart", "sql", "check", "gate"} <= commands
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    shown = capsys.readouterr().out
    doc = cli_module.__doc__ or ""
    assert [c for c in sorted(commands) if c not in shown] == []
    assert [c for c in sorted(commands) if f"``ssbj {c}``" not in doc] == []
