"""``ssbj run --config a.yaml b.yaml ...`` on Spark: jobs switched mid-stream, SIGKILL during the switch, exact."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from multijob_cases import JOBS, dead_letters, expected, land, output, write_job_file, write_masters
from ssbj_process import ssbj

pytestmark = pytest.mark.slow  # four ssbj run subprocesses: 15-60 s each


def _run(root: Path, names: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    files = [str(root / f"{n}.yaml") for n in names]
    return ssbj("run", "--config", *files, "--checkpoint", str(root / "app"), "--quiet", crash=crash)


def _check(root: Path, name: str, files: list[Path]) -> None:
    want, dead = expected(root, name, files)
    got = output(root, name)
    assert sum(got.values()) == sum(want.values()), name
    assert got == want, name
    assert dead_letters(root, name) == dead, name


def test_switch_with_sigkill_during_it_is_exact(tmp_path: Path) -> None:
    write_masters(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "dead").mkdir()
    for n in "abcd":
        write_job_file(tmp_path, n)
    orders = [land(tmp_path, "orders", f, 150) for f in range(4)]
    clicks = [land(tmp_path, "clicks", f, 100) for f in range(2)]
    res = ssbj("validate", *(str(tmp_path / f"{n}.yaml") for n in "adc"))
    assert res.returncode == 0, res.stderr
    assert "decoded once for a, d" in res.stdout and "shared scan" in res.stdout

    # a and b; the process dies after the sinks of checkpoint 3 (file 3): b still has waiting tuples
    res = _run(tmp_path, "ab", crash="after-sink:3")
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    # switch to a, d, c (b removed; d added; c on a second source): killed inside the switch's first checkpoint
    res = _run(tmp_path, "adc", crash="in-checkpoint:3")
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    orders += [land(tmp_path, "orders", f, 150) for f in range(4, 6)]
    clicks.append(land(tmp_path, "clicks", 2, 100))
    res = _run(tmp_path, "adc")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "0 waiting" in res.stdout
    _check(tmp_path, "a", orders)
    _check(tmp_path, "b", orders[:3])  # file 3 died with the old jobs: the new epoch took it
    _check(tmp_path, "d", orders[3:])
    _check(tmp_path, "c", clicks)
    # nothing new: a run changes nothing
    res = _run(tmp_path, "adc")
    assert res.returncode == 0, res.stderr[-3000:]
    for n, files in (("a", orders), ("b", orders[:3]), ("d", orders[3:]), ("c", clicks)):
        _check(tmp_path, n, files)


def test_sigkill_inside_a_drift_switch_is_exact(tmp_path: Path) -> None:
    write_masters(tmp_path)
    for d in ("out", "dead", "clicks"):
        (tmp_path / d).mkdir()
    # one budget, re-optimized after every measured call when anything moves by 1%: c's clicks never
    # arrive, so the customer scan's measured rate halves against the plan's and the plan switches
    shared = {"memory": "1MiB", "drift": 0.01, "measure_calls": 1}
    for n in "abc":
        key, how = JOBS[n][1], JOBS[n][5]
        write_job_file(tmp_path, n, join={"stream_key": key, "type": how}, shared=shared)
    orders = [land(tmp_path, "orders", f, 150) for f in range(3)]
    res = _run(tmp_path, "abc", crash="in-checkpoint:1")  # the second call re-optimizes and dies committing it
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    assert "re-optimized" in res.stderr, res.stderr[-3000:]
    orders += [land(tmp_path, "orders", f, 150) for f in range(3, 5)]
    res = _run(tmp_path, "abc")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "0 waiting" in res.stdout
    for n in "ab":
        _check(tmp_path, n, orders)
    _check(tmp_path, "c", [])
