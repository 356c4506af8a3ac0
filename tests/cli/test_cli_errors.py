"""``ssbj join``'s errors: each names the culprit (file, column, option) and exits 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_cases import (
    join_args,
    make_tables,
    write_parquet,
)

from ssbj.cli import main


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
