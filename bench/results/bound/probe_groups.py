"""The disk phase's probe on captured calls: timed, and its outputs hashed, for A/B across code versions.

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/probe_groups.py capture 0.01 /tmp/calls001.pkl
    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/probe_groups.py time /tmp/calls001.pkl
    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/probe_groups.py digest /tmp/calls001.pkl
    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/probe_groups.py walk /tmp/calls001.pkl

``capture``: SSBJ and MESHJOIN under the same budget on the bound experiment's data (skew
1, stationary, the step-cost driver's plan) to R-cycle 15; the arguments of every
``disk_probe`` call of R-cycle 14 are pickled. The arguments are plain arrays, so any code
version whose kernel takes the same parameters can be timed on them. ``time``: per
algorithm, the calls' summed wall time (best of 3 on fresh copies), rows probed and ns per
row. ``digest``: a hash of every call's outputs and of every array the kernel writes, so
two versions can be shown to compute the same thing. ``walk``: the index words a lookup
walks past its home per row, and the time of the lookup alone against the home word's
load alone (what the walk costs).
"""

from __future__ import annotations

import hashlib
import inspect
import math
import pickle
import sys
import time
from typing import Any

import numpy as np
from numba import njit

sys.path.insert(0, "bench/results/bound")
import probe_state as PS
import stepcost_ab as SA

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.diskprobe import disk_probe
from ssbj.core.hashing import home, mix
from ssbj.core.hsindex import EMPTY, ix_find

NAMES = list(inspect.signature(disk_probe.py_func).parameters)


def capture(frac: float, out: str) -> None:
    """Pickle R-cycle 14's calls of SSBJ and of MESHJOIN at ``frac`` of R."""
    bench, ds, p, budget, b, rows = SA.setup(frac)
    common = PS.spec_args(ds, p, rows)
    got = {}
    for alg in ("ssbj", "meshjoin"):
        spec = JoinSpec(algorithm=alg, chunk_bytes=max(1, budget // 16), memory_budget=budget, **common)
        op = SemiStreamJoin(
            spec, ArrowMaster(ds.master, b), ds.stream_schema, ds.master.schema, cost_model=bench.model()
        )
        calls, shape, w = PS.capture(op, ds, p)
        got[alg] = calls
        print(f"{alg}: {len(calls)} calls, H_S (live, values, index words, ring slots) {shape}, w {w:.0f}")
    with open(out, "wb") as f:
        pickle.dump(got, f)


def _load(path: str) -> dict[str, list[tuple[Any, ...]]]:
    with open(path, "rb") as f:
        return pickle.load(f)  # noqa: S301 (our own file)


def _fresh(c: tuple[Any, ...]) -> list[Any]:
    return [x.copy() if isinstance(x, np.ndarray) else x for x in c]


def timed(path: str) -> None:
    """Print each algorithm's calls' wall time (best of 3), rows probed and ns per row."""
    for alg, calls in _load(path).items():
        total, rows = 0.0, 0
        for c in calls:
            best = math.inf
            for _ in range(3):
                a = _fresh(c)
                t = time.perf_counter()
                out = disk_probe(*a)
                best = min(best, time.perf_counter() - t)
            total += best
            rows += int(out[-1]) - int(c[NAMES.index("start")])
        print(f"{alg}: {len(calls)} calls, {rows} rows, {1e3 * total:.2f} ms, {1e9 * total / rows:.1f} ns a row")


def digest(path: str) -> None:
    """Print a hash of every call's outputs and of the arrays the kernel writes."""
    h = hashlib.sha256()
    for calls in _load(path).values():
        for c in calls:
            a = _fresh(c)
            out = disk_probe(*a)
            for x in [*out, *a]:
                h.update(np.ascontiguousarray(x).tobytes() if isinstance(x, np.ndarray) else repr(x).encode())
    print(h.hexdigest()[:16])


@njit
def _home_loads(mkeys: np.ndarray, hix: np.ndarray) -> int:  # pragma: no cover - compiled
    acc = 0
    for i in range(mkeys.shape[0]):
        acc += hix[home(mix(mkeys[i]), hix.shape[0])]
    return acc


@njit
def _lookups(mkeys: np.ndarray, hix: np.ndarray, ring_key: np.ndarray, cap: int, hi: int) -> int:  # pragma: no cover
    acc = 0
    for i in range(mkeys.shape[0]):
        key = mkeys[i]
        acc += ix_find(hix, ring_key, cap, hi, key, mix(key))[1]
    return acc


@njit
def _walked(mkeys: np.ndarray, hix: np.ndarray) -> int:  # pragma: no cover - compiled
    n = hix.shape[0]
    walked = 0
    for i in range(mkeys.shape[0]):
        j = home(mix(mkeys[i]), n)
        while hix[j] != EMPTY:
            walked += 1
            j = j + 1 if j + 1 < n else 0
    return walked


def walk(path: str) -> None:
    """Print words walked per row, and ns per row of the lookup alone and of the home word's load alone."""
    for alg, calls in _load(path).items():
        args = [dict(zip(NAMES, c, strict=True)) for c in calls]
        # one per partition (a partition probed in several calls is captured once per call)
        parts = {(len(d["mkeys"]), d["mkeys"][:16].tobytes(), d["mkeys"][-16:].tobytes()): d for d in args}.values()
        rows = sum(len(d["mkeys"]) for d in parts)
        walked = sum(_walked(d["mkeys"], d["hix"]) for d in parts)
        times = {}
        for name, run in (
            ("home word", lambda d: _home_loads(d["mkeys"], d["hix"])),
            ("lookup", lambda d: _lookups(d["mkeys"], d["hix"], d["ring_key"], d["cap"], d["hi"])),
        ):
            best = math.inf
            for _ in range(4):
                t = time.perf_counter()
                for d in parts:
                    run(d)
                best = min(best, time.perf_counter() - t)
            times[name] = 1e9 * best / rows
        print(
            f"{alg}: {walked / rows:.2f} words walked a row; home word {times['home word']:.1f} ns, "
            f"lookup {times['lookup']:.1f} ns a row"
        )


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "capture":
        capture(float(sys.argv[2]), sys.argv[3])
    else:
        {"time": timed, "digest": digest, "walk": walk}[cmd](sys.argv[2])
