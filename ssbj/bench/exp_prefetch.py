"""Whether reading the next master partition ahead overlaps with the join (issue 11).

The operator runs over R stored in a database (SQLite through its driver; MariaDB through
PyMySQL and through connectorx, a throw-away server from :mod:`ssbj.testing.mariadb`),
with :class:`ssbj.core.prefetch.PrefetchingScan` at depth 0 (off), 1 and 2, the same b and
the same chunk of stream tuples per step for every depth (no memory budget: under one
budget, each read-ahead buffer takes its bytes from H_S, so a deeper prefetch would also
mean smaller steps and the comparison would mix two effects; the queue's bytes are
reported instead), repetitions interleaved, in one process. Reported per backend and depth: tuples/s over the measured
steps' wall time and its ratio to depth 0, the mean read time (in the prefetch thread when
read ahead) against the mean time a step waited for its partition, the join time per step
without the wait (a GIL fight shows as a slower join or a slower background read), and a
timeline of a window of steps: each step's join interval and each read's interval, with
the thread it ran in. Before the runs, :func:`overlap_probe` times k partition reads alone,
k operator steps alone (R in memory) and both at once, per backend: how much of the two
can overlap at all in one process (the GIL and the machine's cores decide).
"""

from __future__ import annotations

import math
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import sqlalchemy as sa

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.bench.harness import Bench, Json
from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.prefetch import PrefetchingScan
from ssbj.testing.mariadb import launch

DEPTHS = (0, 1, 2)
PARTITIONS = 10  # k
WINDOW = 6  # steps shown in the timeline
CHUNK_SHARE = 0.2  # H_S's share of R's projected bytes (sets the join work per step)
MAX_ROWS = 400_000  # |R| loaded into the databases (loading is not timed, but takes a while)

ScanFactory = Callable[[int], SqlMasterScan]


def _load(engine: sa.Engine, master: pa.Table) -> None:
    """Create table ``master_r`` (mid primary key) and insert R in chunks."""
    md = sa.MetaData()
    t = sa.Table(
        "master_r",
        md,
        sa.Column("mid", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("mk", sa.BigInteger, nullable=False),
        sa.Column("attr", sa.BigInteger, nullable=False),
        sa.Column("mpayload", sa.String(128), nullable=False),
    )
    with engine.begin() as conn:
        md.drop_all(conn)
        md.create_all(conn)
    rows = master.to_pylist()
    for i in range(0, len(rows), 20_000):
        with engine.begin() as conn:
            conn.execute(t.insert(), rows[i : i + 20_000])


def _master(n: int, payload: int, seed: int) -> pa.Table:
    """R of the synthetic data set with its payload as text of ``payload`` characters (a SQL VARCHAR)."""
    rng = np.random.default_rng([seed, 11])
    return pa.table(
        {
            "mid": np.arange(n, dtype=np.int64),
            "mk": rng.integers(0, n, n, dtype=np.int64),
            "attr": rng.integers(0, 1 << 31, n, dtype=np.int64),
            "mpayload": pa.array([f"{i:0{payload}d}" for i in range(n)], pa.string()),
        }
    )


def _run(
    bench: Bench,
    make_scan: ScanFactory,
    depth: int,
    b: int,
    chunk: int,
    stream_schema: pa.Schema,
    batches: Callable[[], Any],
) -> Json:
    """Warm one R-cycle, then measure two; returns rates, read/wait/join times and a timeline."""
    p = bench.p
    spec = JoinSpec("sk", "mk", ("attr", "mpayload"), chunk_bytes=chunk, max_step_tuples=p.max_step_tuples)
    scan = PrefetchingScan(make_scan(b), depth)
    op = SemiStreamJoin(spec, scan, stream_schema, scan.schema)
    feed = batches()
    need = p.max_step_tuples

    def refill() -> bool:
        while op.buffered_tuples < need:
            nxt = next(feed, None)
            if nxt is None:
                return False
            op.push(nxt)
        return True

    steps: list[Json] = []
    cycles = 0
    try:
        while cycles < 3 and refill():
            t0 = time.perf_counter()
            m = op.step().metrics
            t1 = time.perf_counter()
            if cycles >= 1:  # the first R-cycle warms up (connections, numba, first read)
                steps.append(
                    {
                        "t0": t0,
                        "t1": t1,
                        "p": m.partition,
                        "w": m.w,
                        "read": m.io_seconds,
                        "wait": m.read_wait_seconds,
                        "prefetch_bytes": m.memory.prefetch,
                    }
                )
            if m.partition == m.partitions - 1:
                cycles += 1
        events = list(scan.stats.events)
        hits, misses = scan.stats.hits, scan.stats.misses
        peak = scan.stats.peak_nbytes
    finally:
        scan.close()
    wall = sum(s["t1"] - s["t0"] for s in steps)
    tuples = sum(s["w"] for s in steps)
    start = steps[0]["t0"] if steps else 0.0
    end = steps[-1]["t1"] if steps else 0.0
    # background reads inside the measured span, and how much of each ran while a step joined
    bg = [(a, z) for kind, _, a, z in events if kind == "prefetch" and a >= start and z <= end]
    joins = [(s["t0"] + s["wait"], s["t1"]) for s in steps]
    overlap = sum(_overlap(r, joins) for r in bg)
    bg_time = sum(z - a for a, z in bg)
    return {
        "depth": depth,
        "steps": len(steps),
        "tuples": tuples,
        "rate": tuples / wall if wall > 0 else 0.0,
        "read_ms": 1e3 * statistics.fmean(s["read"] for s in steps) if steps else None,
        "wait_ms": 1e3 * statistics.fmean(s["wait"] for s in steps) if steps else None,
        "join_ms": 1e3 * statistics.fmean(s["t1"] - s["t0"] - s["wait"] for s in steps) if steps else None,
        "step_ms": 1e3 * wall / max(1, len(steps)),
        "background_read_overlapped": overlap / bg_time if bg_time > 0 else None,
        "hits": hits,
        "misses": misses,
        "queue_peak_bytes": peak,
        "timeline": _timeline(steps, events),
    }


def overlap_probe(read: Callable[[], Any], step: Callable[[], Any], n: int, reps: int = 3) -> Json:
    """Time ``n`` reads alone, ``n`` steps alone, then both at once (reads in a thread); median of ``reps``.

    ``speedup`` = (reads alone + steps alone) / both at once: 1.0 means no overlap at all
    (the GIL, or the CPU, serialises them), ``ideal`` = (reads + steps) / the longer of the two.
    """
    rows = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            read()
        t_read = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        t_step = time.perf_counter() - t0
        t0 = time.perf_counter()
        th = threading.Thread(target=lambda: [read() for _ in range(n)], daemon=True)
        th.start()
        for _ in range(n):
            step()
        th.join()
        t_both = time.perf_counter() - t0
        rows.append((t_read, t_step, t_both))
    rows.sort(key=lambda r: (r[0] + r[1]) / r[2])
    t_read, t_step, t_both = rows[len(rows) // 2]
    return {
        "reads_s": t_read,
        "steps_s": t_step,
        "both_s": t_both,
        "speedup": (t_read + t_step) / t_both,
        "ideal": (t_read + t_step) / max(t_read, t_step),
        "rep_speedups": [(a + b) / c for a, b, c in rows],
    }


def _overlap(r: tuple[float, float], spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(r[1], z) - max(r[0], a)) for a, z in spans)


def _timeline(steps: list[Json], events: list[tuple[str, int, float, float]]) -> list[str]:
    """Lines for a window of steps: each step's wait and join, each read with its thread, in ms."""
    if len(steps) < 2:
        return []
    win = steps[1 : 1 + WINDOW]
    t_ref, t_end = win[0]["t0"], win[-1]["t1"]
    rows: list[tuple[float, str]] = []
    for s in win:
        a, w, z = s["t0"] - t_ref, s["wait"], s["t1"] - t_ref
        rows.append((a, f"step  p={s['p']:<3d} wait {1e3 * a:8.1f} .. {1e3 * (a + w):8.1f}   join .. {1e3 * z:8.1f}"))
    for kind, part, a0, z0 in events:
        if z0 < t_ref or a0 > t_end:
            continue
        who = "prefetch thread" if kind == "prefetch" else "step thread (sync)"
        a, z = a0 - t_ref, z0 - t_ref
        rows.append((a, f"  read p={part:<3d}      {1e3 * a:8.1f} .. {1e3 * z:8.1f}   ({who})"))
    return [line for _, line in sorted(rows, key=lambda r: r[0])]


def _backends(bench: Bench, master: pa.Table, work: Path) -> tuple[list[tuple[str, ScanFactory]], list[Any], Json]:
    """Return the SQLite file and, when the binaries exist, a MariaDB server, each loaded with R."""
    notes: Json = {}
    closers: list[Any] = []
    out: list[tuple[str, ScanFactory]] = []
    sq = sa.create_engine(f"sqlite:///{work / 'master.sqlite'}")
    closers.append(sq.dispose)
    t = time.perf_counter()
    _load(sq, master)
    notes["sqlite_load_seconds"] = time.perf_counter() - t
    out.append(("sqlite/driver", lambda b: SqlMasterScan(sq, "master_r", "mk", b, columns=["attr", "mpayload"])))
    try:
        server = launch(work / "mariadb")
    except (FileNotFoundError, OSError, RuntimeError) as exc:
        notes["mariadb"] = f"not run: {exc}"
        return out, closers, notes
    closers.append(server.stop)
    my = sa.create_engine(server.url, pool_pre_ping=True)
    closers.insert(0, my.dispose)
    t = time.perf_counter()
    _load(my, master)
    notes["mariadb_load_seconds"] = time.perf_counter() - t
    for reader in ("driver", "connectorx"):
        name = f"mariadb/{'pymysql' if reader == 'driver' else 'connectorx'}"

        def make(b: int, reader: str = reader) -> SqlMasterScan:
            return SqlMasterScan(my, "master_r", "mk", b, columns=["attr", "mpayload"], reader=reader)

        try:
            make(1 << 30)
        except Exception as exc:  # connectorx missing: report, run the rest
            notes[name] = f"not run: {exc}"
            continue
        out.append((name, make))
    return out, closers, notes


def _probe(bench: Bench, backends: list[tuple[str, ScanFactory]], master: pa.Table, ds: Any) -> Json:
    """Run :func:`overlap_probe` for each backend's partition read against an operator step (R in memory)."""
    b = math.ceil(master.num_rows / PARTITIONS)
    spec = JoinSpec("sk", "mk", ("attr", "mpayload"), chunk_bytes=1 << 20, max_step_tuples=1 << 16)
    op = SemiStreamJoin(spec, ArrowMaster(master, b), ds.stream_schema, master.schema)
    stream = ds.rows(200_000)

    def step() -> None:
        if op.buffered_tuples < (1 << 16):
            op.push(stream)
        op.step()

    for _ in range(3 * PARTITIONS):  # past the first R-cycles (compilation, warm-up)
        step()
    out: Json = {}
    for name, make in backends:
        scan = make(b)

        def read(scan: SqlMasterScan = scan) -> None:
            scan.read_partition(1)

        read()
        r = overlap_probe(read, step, PARTITIONS)
        out[name] = r
        bench.log(
            f"  overlap probe {name}: {PARTITIONS} reads {r['reads_s']:.2f}s, {PARTITIONS} steps {r['steps_s']:.2f}s, "
            f"both at once {r['both_s']:.2f}s: speedup {r['speedup']:.2f}x (ideal {r['ideal']:.2f}x)"
        )
    return out


def exp_prefetch(bench: Bench) -> Json:
    """Tuples/s with prefetch 1 and 2 over prefetch 0, per backend, with the timeline of a window."""
    p = bench.p
    n = min(p.r_small, MAX_ROWS)
    ds = bench.synthetic(n, 1.0)
    master = _master(n, p.master_payload, bench.seed)
    proj_bytes = int(master.select(["mk", "attr", "mpayload"]).nbytes)
    # H_S holds k + 1 chunks: CHUNK_SHARE of R's projected bytes in all
    chunk = int(CHUNK_SHARE * proj_bytes / (PARTITIONS + 1))
    b = math.ceil(n / PARTITIONS)
    results: Json = {"r_rows": n, "partition_rows": b, "partitions": PARTITIONS, "chunk_bytes": chunk, "backends": {}}
    with tempfile.TemporaryDirectory(prefix="ssbj-prefetch-") as tmp:
        backends, closers, notes = _backends(bench, master, Path(tmp))
        results["notes"] = notes
        try:
            results["overlap_probe"] = _probe(bench, backends, master, ds)
            for name, make in backends:
                runs: dict[int, list[Json]] = {d: [] for d in DEPTHS}
                for rep in range(max(3, p.reps)):
                    for d in DEPTHS:
                        r = _run(bench, make, d, b, chunk, ds.stream_schema, lambda: ds.batches(p.batch_rows, 1 << 40))
                        runs[d].append(r)
                        bench.log(
                            f"  {name} prefetch {d} rep {rep + 1}: {r['rate']:,.0f} tuples/s, read {r['read_ms']:.1f} "
                            f"ms, wait {r['wait_ms']:.1f} ms, join {r['join_ms']:.1f} ms"
                        )
                med = {d: sorted(rs, key=lambda r: r["rate"])[len(rs) // 2] for d, rs in runs.items()}
                base = med[0]["rate"]
                for d in DEPTHS:
                    med[d]["ratio_to_0"] = med[d]["rate"] / base if base else None
                    med[d]["rep_rates"] = [r["rate"] for r in runs[d]]
                results["backends"][name] = {str(d): med[d] for d in DEPTHS}
                bench.log(
                    f"  {name}: prefetch 1 / 0 = {med[1]['ratio_to_0']:.2f}x, 2 / 0 = {med[2]['ratio_to_0']:.2f}x"
                )
                for d in (0, 1):
                    bench.log(f"  {name} prefetch {d}: timeline of {WINDOW} measured steps (ms)")
                    for line in med[d]["timeline"]:
                        bench.log(f"    {line}")
        finally:
            for close in closers:
                close()
    return results
