"""Tests of the ``ssbj`` command line (join, demo, bench delegation)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from reference import as_multiset, batch_join

from ssbj.cli import main, parse_size
from ssbj.errors import ConfigError

STREAM_COLS = ["sid", "sk", "attr"]
MASTER_COLS = ["mid", "mk", "attr", "mname"]
# the master's "attr" collides with the stream's and is renamed in the output
OUT_COLS = ["sid", "sk", "attr", "mid", "mk", "attr_master", "mname"]
MEMORY = "12kB"  # small enough that R is scanned in several partitions


def make_tables(key_type: str = "int", n_stream: int = 6000, seed: int = 1) -> tuple[pa.Table, pa.Table]:
    """Skewed stream with NULL keys and unknown keys; master with duplicate and NULL keys."""
    rng = np.random.default_rng(seed)
    hot = rng.integers(0, 8, n_stream)  # a few hot keys: the cache should take them
    cold = rng.integers(0, 360, n_stream)  # 300..359 are not in the master
    sk = np.where(rng.random(n_stream) < 0.5, hot, cold)
    sk_list: list[Any] = [None if i % 53 == 0 else int(k) for i, k in enumerate(sk)]
    mk_list: list[Any] = [*range(300), *range(0, 100, 2), None, None, 5, 5]  # many-to-many
    if key_type == "string":
        sk_list = [None if k is None else f"k{k}" for k in sk_list]
        mk_list = [None if k is None else f"k{k}" for k in mk_list]
    n_master = len(mk_list)
    stream = pa.table(
        {
            "sid": pa.array(np.arange(n_stream), pa.int64()),
            "sk": pa.array(sk_list, pa.string() if key_type == "string" else pa.int64()),
            "attr": pa.array([f"s{i % 17}" for i in range(n_stream)]),
        }
    )
    master = pa.table(
        {
            "mid": pa.array(np.arange(n_master) + 10_000, pa.int64()),
            "mk": pa.array(mk_list, pa.string() if key_type == "string" else pa.int64()),
            "attr": pa.array(rng.integers(0, 1000, n_master), pa.int64()),
            "mname": pa.array([f"name-{i}" for i in range(n_master)]),
        }
    )
    return stream, master


def write_parquet(tmp_path: Path, stream: pa.Table, master: pa.Table) -> tuple[Path, Path]:
    s, m = tmp_path / "stream.parquet", tmp_path / "master.pq"
    pq.write_table(stream, s, row_group_size=1000)
    pq.write_table(master, m)
    return s, m


def write_csv(path: Path, table: pa.Table) -> None:
    if path.name.endswith(".gz"):
        with pa.CompressedOutputStream(str(path), "gzip") as out:
            pacsv.write_csv(table, out)
    else:
        pacsv.write_csv(table, path)


def join_args(s: Path, m: Path, out: Path, *extra: str) -> list[str]:
    return [
        "join",
        "--stream",
        str(s),
        "--master",
        str(m),
        "--stream-key",
        "sk",
        "--master-key",
        "mk",
        "--memory",
        MEMORY,
        "--batch-rows",
        "700",
        "--out",
        str(out),
        *extra,
    ]


def run_stats(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    report: dict[str, Any] = json.loads(captured.out)
    return report


def check_reconciles(report: dict[str, Any], out: Path) -> None:
    t = report["totals"]
    assert t["waiting"] == 0
    assert t["tuples_in"] == t["matched_source_rows"] + t["unmatched_source_rows"] + t["waiting"]
    assert report["rows_written"] == t["output_rows"] == pq.read_metadata(out).num_rows


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


# ---------------------------------------------------------------------- join: errors
def _error_case(tmp_path: Path, case: str) -> tuple[list[str], list[str]]:
    """Argv of an error case and substrings its message must contain."""
    stream, master = make_tables(n_stream=500)
    s, m = write_parquet(tmp_path, stream, master)
    out = tmp_path / "out.parquet"
    if case == "missing stream":
        return join_args(tmp_path / "nope.parquet", m, out), [
            "stream file not found",
            "nope.parquet",
        ]
    if case == "missing master":
        return join_args(s, tmp_path / "gone.csv", out), ["master file not found", "gone.csv"]
    if case == "unsupported type":
        txt = tmp_path / "stream.txt"
        txt.write_text("sid,sk\n1,2\n")
        return join_args(txt, m, out), ["stream.txt", "unsupported file type"]
    if case == "unreadable parquet":
        junk = tmp_path / "junk.parquet"
        junk.write_bytes(b"this is not parquet at all")
        return join_args(s, junk, out), ["cannot read master file", "junk.parquet", "Parquet"]
    if case == "unreadable csv":
        junk = tmp_path / "junk.csv.gz"
        junk.write_bytes(b"not gzip")
        return join_args(junk, m, out), ["cannot read stream file", "junk.csv.gz", "CSV"]
    if case == "directory":
        return join_args(s, tmp_path, out), ["is not a regular file"]
    if case == "missing stream key":
        argv = [*join_args(s, m, out), "--stream-key", "skey"]
        return argv, ["stream key column 'skey'", "available columns: sid, sk, attr"]
    if case == "missing master key":
        argv = [*join_args(s, m, out), "--master-key", "mkey"]
        return argv, ["master key column 'mkey'", "available columns: mid, mk, attr, mname"]
    if case == "incompatible keys":
        argv = [*join_args(s, m, out), "--master-key", "mname"]
        return argv, ["int64", "string", "'sk'", "'mname'", "cannot join"]
    if case == "float key":
        fs = tmp_path / "fstream.parquet"
        pq.write_table(stream.set_column(1, "sk", pa.array(np.zeros(500))), fs)
        return join_args(fs, m, out), ["double", "not supported"]
    if case == "bad master column":
        return [*join_args(s, m, out), "--master-columns", "mid,zzz"], [
            "'zzz'",
            "--master-columns",
            "mname",
        ]
    if case == "empty master column":
        return [*join_args(s, m, out), "--master-columns", "mid,,mk"], ["--master-columns"]
    if case == "repeated master column":
        return [*join_args(s, m, out), "--master-columns", "mid,mid"], ["--master-columns", "mid"]
    if case == "blank master columns":
        return [*join_args(s, m, out), "--master-columns", ""], ["--master-columns"]
    if case.startswith("memory "):
        value = case.removeprefix("memory ")
        return [*join_args(s, m, out), f"--memory={value}"], ["--memory", repr(value)]
    if case == "memory too small":
        return [*join_args(s, m, out), "--memory", "100B"], ["raise --memory"]
    if case == "bad batch rows":
        return [*join_args(s, m, out), "--batch-rows", "0"], ["--batch-rows"]
    if case == "bad switch factor":
        return [*join_args(s, m, out), "--switch-factor", "0"], ["switch_factor"]
    if case == "bad algorithm":
        return [*join_args(s, m, out), "--algorithm", "hashjoin"], ["--algorithm", "hashjoin"]
    if case == "missing option":
        return ["join", "--stream", str(s)], ["required"]
    if case == "no output dir":
        return join_args(s, m, tmp_path / "no" / "such" / "out.parquet"), ["output directory"]
    if case == "output is input":
        return join_args(s, m, s), ["overwrite input"]
    if case == "missing calibration":
        return [*join_args(s, m, out), "--calibration", str(tmp_path / "cal.json")], ["calibration"]
    raise AssertionError(case)


ERROR_CASES = [
    "missing stream",
    "missing master",
    "unsupported type",
    "unreadable parquet",
    "unreadable csv",
    "directory",
    "missing stream key",
    "missing master key",
    "incompatible keys",
    "float key",
    "bad master column",
    "empty master column",
    "repeated master column",
    "blank master columns",
    "memory 64XB",
    "memory abc",
    "memory 0",
    "memory -5MB",
    "memory 1.5.2GB",
    "memory too small",
    "bad batch rows",
    "bad switch factor",
    "bad algorithm",
    "missing option",
    "no output dir",
    "output is input",
    "missing calibration",
]


@pytest.mark.parametrize("case", ERROR_CASES)
def test_join_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    argv, expected = _error_case(tmp_path, case)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    assert err.startswith("ssbj: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, (text, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no leftovers


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
    assert any("incrementing" in line for line in lines)


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
