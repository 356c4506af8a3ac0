"""``ssbj join --stats`` as a new user runs it: issue 9's case, generated here, not by the bench.

Usage (from the repository root; ``PYTHONPATH`` selects the code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/cli_user/cli_user.py DATA_DIR KEY_TYPE MEMORY [ROUNDS [STREAM]]

Writes, once per DATA_DIR and KEY_TYPE (``int64`` or ``int32``), a master of 2,000,000
rows (join values drawn uniformly with repetition from 2M values, a 20-character
payload) and a stream of STREAM tuples (default 1,000,000; Zipf 1 over the same 2M values, ranks mapped
to values by a random permutation, a 16-character payload) as Parquet files written by
pyarrow's defaults, so the master is read back in 131,072-row chunks. Then runs
``ssbj join --stats`` for SSBJ and MESHJOIN, ROUNDS times each, interleaved, and prints
one JSON line per run: wall seconds, the operator's service rate (tuples per busy
second), tuples per R-cycle, the plan, the memory-optimal bound and the efficiency. The
first round compiles nothing new (numba's cache) only if the code measured ran once before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

R_ROWS = 2_000_000
STREAM = 1_000_000


def write_data(d: Path, key_type: str, n: int = STREAM) -> tuple[Path, Path]:
    """Write (once) the master and the stream of ``n`` tuples with join keys of ``key_type``."""
    tail = "" if n == STREAM else f"-{n}"
    master, stream = d / f"master-{key_type}.parquet", d / f"stream-{key_type}{tail}.parquet"
    if master.exists() and stream.exists():
        return master, stream
    d.mkdir(parents=True, exist_ok=True)
    kt = pa.int64() if key_type == "int64" else pa.int32()
    rng = np.random.default_rng(12)
    mk = rng.integers(0, R_ROWS, R_ROWS)
    pay = np.char.add("p", rng.integers(10**18, 9 * 10**18, R_ROWS).astype(str))
    pq.write_table(pa.table({"id": pa.array(mk).cast(kt), "payload": pa.array(pay.astype(object))}), master)
    w = 1.0 / np.arange(1, R_ROWS + 1)
    cdf = np.cumsum(w) / w.sum()
    ranks = np.searchsorted(cdf, rng.random(n))
    sk = rng.permutation(R_ROWS)[ranks]
    info = np.char.add("s", rng.integers(10**14, 9 * 10**14, n).astype(str))
    pq.write_table(pa.table({"key": pa.array(sk).cast(kt), "info": pa.array(info.astype(object))}), stream)
    return master, stream


def run(master: Path, stream: Path, out: Path, algorithm: str, memory: str) -> dict[str, object]:
    """One ``ssbj join --stats`` in a fresh process; the figures of its report."""
    cmd = [sys.executable, "-m", "ssbj.cli", "join", "--stream", str(stream), "--master", str(master)]
    cmd += ["--stream-key", "key", "--master-key", "id", "--memory", memory, "--algorithm", algorithm]
    cmd += ["--out", str(out), "--stats"]
    # (run outside the repository: ``-m`` puts the working directory first on sys.path, before PYTHONPATH)
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ, cwd=out.parent)  # noqa: S603
    rep = json.loads(done.stdout)
    t, b = rep["totals"], rep["bound"]
    return {
        "algorithm": algorithm,
        "memory": memory,
        "wall_seconds": round(rep["wall_seconds"], 2),
        "service_rate": round(t["service_rate"]),
        "cache_share": round(t["cache_share"], 3),
        "tuples_per_r_cycle": round(b["achieved_tuples_per_r_cycle"]),
        "k": rep["memory_plan"]["k"],
        "bound": round(b["bound"]["ratio"], 2),
        "efficiency": None if b["efficiency"] is None else round(b["efficiency"], 3),
        "peak_over_budget": round(rep["memory"]["peak"]["total"] / rep["memory"]["budget_bytes"], 3),
    }


def main(d: Path, key_type: str, memory: str, rounds: int, n: int) -> None:
    """Run both algorithms ``rounds`` times, interleaved, on ``n`` stream tuples, and print each run."""
    master, stream = write_data(d, key_type, n)
    for _ in range(rounds):
        for algorithm in ("ssbj", "meshjoin"):
            res = run(master, stream, d / f"out-{algorithm}.parquet", algorithm, memory)
            print(json.dumps({"key_type": key_type, "stream": n, **res}), flush=True)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(Path(a[0]), a[1], a[2], int(a[3]) if len(a) > 3 else 1, int(a[4]) if len(a) > 4 else STREAM)
