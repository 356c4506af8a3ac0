"""The hybrid step (docs/hybrid.md): scan only vs cost-model choice vs lookup always.

A master table in a real database (a SQLite file; MariaDB through ``ssbj.testing`` with
``--mariadb``), an index on the join key, read by :class:`SqlMasterScan`. The stream
arrives at a fixed number of tuples per step, from a few (a slow stream) to thousands;
for each rate the operator runs with ``hybrid`` off, auto and always, in the same
process, one after the other, on the same data. Per run: ``k`` warm-up steps, then
``2k`` measured steps (the operator's own time inside ``step()``), then a drain whose
output is compared across the three modes (same rows, same sums).

What is counted goes through one wrapper around the scan: master rows read (partition
reads and lookups), round trips (one per partition read, one per ``IN`` batch), seconds
in the database calls. The lookup constants of the cost model (c_rt, c_key, c_row,
c_io_row) are fitted first by :func:`ssbj.core.costmodel.calibrate_lookup` on measured
partition reads and lookups of the same table; a fourth run, ``auto_measured``, is ``auto``
given no constants, pricing its paths by its own measurements (:mod:`ssbj.core.pathcost`).

``python -m ssbj.bench.exp_hybrid --scale small [--mariadb] [--md FILE]`` prints the
table; ``ssbj bench --only hybrid`` runs the SQLite part as one of the experiments.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.bench.harness import Bench, Json, _ratio, emit, stderr_log
from ssbj.core import CostModel, JoinSpec, SemiStreamJoin
from ssbj.core.costmodel import CostConstants, calibrate_lookup
from ssbj.core.spec import Algorithm, Hybrid
from ssbj.testing.mariadb import launch

MODES: tuple[Hybrid, ...] = ("off", "auto", "always")
# the runs of each point: the modes, and auto priced by its own measurements (no constants given)
RUNS = ("off", "auto", "auto_measured", "always")


def _hybrid(run: str) -> Hybrid:
    """Return the ``hybrid`` setting of a run's label."""
    return "auto" if run == "auto_measured" else cast(Hybrid, run)


@dataclass(frozen=True)
class Size:
    """Master rows, partitions, stream tuples per step, repetitions."""

    rows: int
    k: int
    rates: tuple[int, ...]
    reps: int


SIZES = {
    "small": Size(40_000, 16, (1, 4, 16, 64, 256, 512, 1024, 4096), 5),
    "full": Size(400_000, 16, (1, 4, 16, 64, 256, 1024, 2048, 4096, 16384), 3),
}


class CountingMaster:
    """A master scan with lookup that counts rows read, round trips and seconds in the database."""

    def __init__(self, scan: SqlMasterScan) -> None:
        self.scan = scan
        self.reset()

    def reset(self) -> None:
        """Zero the counters."""
        self.rows = 0
        self.trips = 0
        self.seconds = 0.0

    @property
    def partition_rows(self) -> int:
        """B."""
        return self.scan.partition_rows

    @property
    def num_rows(self) -> int:
        """R_t."""
        return self.scan.num_rows

    @property
    def lookup_batch(self) -> int:
        """Keys per IN list."""
        return self.scan.lookup_batch

    def num_partitions(self) -> int:
        """K."""
        return self.scan.num_partitions()

    def read_partition(self, p: int) -> pa.Table:
        """Read partition ``p``, counted."""
        t = time.perf_counter()
        out = self.scan.read_partition(p)
        self.seconds += time.perf_counter() - t
        self.rows += out.num_rows
        self.trips += 1
        return out

    def lookup(self, key: str, values: pa.Array) -> pa.Table:
        """Look ``values`` up, counted."""
        t = time.perf_counter()
        out = self.scan.lookup(key, values)
        self.seconds += time.perf_counter() - t
        self.rows += out.num_rows
        n = len(pc.unique(pc.drop_null(values))) if len(values) else 0
        self.trips += -(-n // self.lookup_batch)
        return out

    def repartition(self, partition_rows: int) -> CountingMaster:
        """Return the same table in partitions of ``partition_rows``."""
        return CountingMaster(self.scan.repartition(partition_rows))


def make_master(engine: sa.Engine, rows: int, seed: int) -> str:
    """Table ``hyb_master``: ``rows`` rows, two per join key ``k`` (indexed), keys spread over the partitions."""
    meta = sa.MetaData()
    t = sa.Table(
        "hyb_master",
        meta,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("k", sa.Integer, nullable=True, index=True),
        sa.Column("attr", sa.String(32)),
        sa.Column("v", sa.Integer),
    )
    perm = np.random.default_rng(seed).permutation(rows)
    with engine.begin() as conn:
        meta.drop_all(conn)
        meta.create_all(conn)
        for lo in range(0, rows, 20_000):
            conn.execute(
                sa.insert(t),
                [
                    {"id": i, "k": int(perm[i]) // 2, "attr": f"attr-{i:08d}", "v": i % 1000}
                    for i in range(lo, min(rows, lo + 20_000))
                ],
            )
    return "hyb_master"


def calibrate(master: CountingMaster, seed: int) -> tuple[CostConstants, Json]:
    """Fit the lookup and read constants to measured lookups and partition reads of this table."""
    rng = random.Random(seed)
    n_keys = master.num_rows // 2
    lookups: list[tuple[int, int, int, float]] = []
    reads: dict[str, list[tuple[int, float]]] = {"b": [], "b/10": []}
    small = master.scan.repartition(max(1, master.partition_rows // 10))
    for _ in range(2):
        # a whole R-cycle at b: single reads vary up to 5x (every other 25,000-row read
        # was slow in one measurement), and the scan pays their mean
        for p in range(master.num_partitions()):
            t = time.perf_counter()
            got = master.scan.read_partition(p)
            reads["b"].append((got.num_rows, time.perf_counter() - t))
        for p in range(min(8, small.num_partitions())):
            t = time.perf_counter()
            got = small.read_partition(p)
            reads["b/10"].append((got.num_rows, time.perf_counter() - t))
        for n in (1, 4, 16, 64, 256, 1024, 2048, 4096):
            keys = pa.array(rng.sample(range(n_keys), min(n, n_keys)), pa.int64())
            t = time.perf_counter()
            got = master.scan.lookup("k", keys)
            lookups.append((-(-len(keys) // master.lookup_batch), len(keys), got.num_rows, time.perf_counter() - t))
    # one sample per read size: the mean rows and seconds of its reads
    scans = [(sum(r for r, _ in rs) // len(rs), sum(t for _, t in rs) / len(rs)) for rs in reads.values()]
    c = calibrate_lookup(lookups, scans)
    return c, {
        "c_rt_us": c.c_rt / 1e3,
        "c_key_us": c.c_key / 1e3,
        "c_row_us": c.c_row / 1e3,
        "c_io_row_us": c.c_io_row / 1e3,
        "lookups": len(lookups),
        "partition_reads": sum(len(rs) for rs in reads.values()),
    }


def _stream(rows: int, n_keys: int, seed: int) -> pa.Table:
    """Uniform keys over 110% of the master's keys (about 9% unmatched) and 1% NULL."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, int(n_keys * 1.1), rows)
    valid = rng.random(rows) >= 0.01
    return pa.table({"sid": np.arange(rows, dtype=np.int64), "sk": pa.array(keys, pa.int64(), mask=~valid)})


def run_one(master: CountingMaster, model: CostModel, algorithm: Algorithm, mode: str, w: int, seed: int) -> Json:
    """``k`` warm-up steps, ``4k`` measured steps of ``w`` arrivals each, then a drain.

    ``mode``: a ``hybrid`` setting, or ``auto_measured`` (auto given no constants: it prices
    its paths by what it measures, :mod:`ssbj.core.pathcost`).
    """
    k = master.num_partitions()
    warm, measured = k, 4 * k
    stream = _stream(w * (warm + measured), master.num_rows // 2, seed)
    spec = JoinSpec("sk", "k", ("attr", "v"), algorithm=algorithm, chunk_bytes=1 << 30, hybrid=_hybrid(mode))
    op = SemiStreamJoin(spec, master, stream.schema, master.scan.schema, None if mode == "auto_measured" else model)
    check = [0, 0, 0, 0]  # output rows, unmatched rows, sum of sid x v over pairs, sum of unmatched sid

    def collect(r: Any) -> None:
        check[0] += r.enriched.num_rows
        check[1] += r.unmatched.num_rows
        if r.enriched.num_rows:
            sid = r.enriched.column("sid").to_numpy()
            check[2] += int((sid * r.enriched.column("v").to_numpy()).sum())
        if r.unmatched.num_rows:
            check[3] += int(r.unmatched.column("sid").to_numpy().sum())

    paths: Counter[str] = Counter()
    seconds = cpu = 0.0
    for i in range(warm + measured):
        op.push(stream.slice(i * w, w))
        if i == warm:
            master.reset()
            seconds = cpu = 0.0
            paths.clear()
        t, c = time.perf_counter(), time.process_time()
        r = op.step()
        seconds += time.perf_counter() - t
        cpu += time.process_time() - c
        paths[r.metrics.path] += 1
        collect(r)
    rows, trips, db_s = master.rows, master.trips, master.seconds
    for r in op.drain():
        collect(r)
    tuples = w * measured
    return {
        "mode": mode,
        "tuples_per_step": w,
        "tuples_per_s": tuples / seconds if seconds else None,
        # this process's CPU only: all the work for SQLite (in-process), not MariaDB's server
        "tuples_per_cpu_s": tuples / cpu if cpu else None,
        "db_rows_per_tuple": rows / tuples,
        "round_trips_per_tuple": trips / tuples,
        "db_seconds_share": db_s / seconds if seconds else None,
        "paths": dict(paths),
        "check": check,
    }


def measure(
    master: CountingMaster, model: CostModel, rates: tuple[int, ...], reps: int, seed: int, log: Any
) -> list[Json]:
    """Every rate with the three modes, for both algorithms; ratios against the scan-only run.

    The modes run round-robin ``reps`` times (off, auto, always, off, ...), so a change of
    machine load hits all three alike; each mode keeps its run with the median rate.
    """
    points = []
    algorithms: tuple[Algorithm, ...] = ("meshjoin", "ssbj")
    for algorithm in algorithms:
        for w in rates:
            all_runs: dict[str, list[Json]] = {m: [] for m in RUNS}
            for _ in range(reps):
                for m in RUNS:
                    all_runs[m].append(run_one(master, model, algorithm, m, w, seed + w))
            runs: dict[str, Json] = {}
            for mode, rs in all_runs.items():
                wall = sorted(float(r["tuples_per_s"] or 0.0) for r in rs)
                cpu = sorted(float(r["tuples_per_cpu_s"] or 0.0) for r in rs)
                # rows, round trips, paths and output are the same in every repetition
                runs[mode] = dict(rs[0], tuples_per_s=wall[len(wall) // 2], tuples_per_cpu_s=cpu[len(cpu) // 2])
                runs[mode]["rep_tuples_per_s"] = [r["tuples_per_s"] for r in rs]
                runs[mode]["rep_tuples_per_cpu_s"] = [r["tuples_per_cpu_s"] for r in rs]
            off = runs["off"]
            pt: Json = {"algorithm": algorithm, "tuples_per_step": w, "runs": runs}
            for name in ("auto", "auto_measured", "always"):
                r = runs[name]
                pt[f"{name}_rate_ratio"] = _ratio(r["tuples_per_s"], off["tuples_per_s"])
                pt[f"{name}_cpu_ratio"] = _ratio(r["tuples_per_cpu_s"], off["tuples_per_cpu_s"])
                pt[f"{name}_rows_ratio"] = _ratio(r["db_rows_per_tuple"], off["db_rows_per_tuple"])
                pt[f"{name}_trips_ratio"] = _ratio(r["round_trips_per_tuple"], off["round_trips_per_tuple"])
            best = max(off["tuples_per_s"], runs["always"]["tuples_per_s"])
            best_cpu = max(off["tuples_per_cpu_s"], runs["always"]["tuples_per_cpu_s"])
            # the decision's test: auto took mostly the path whose own run measured faster
            lookup_faster = runs["always"]["tuples_per_s"] > off["tuples_per_s"]
            for name, tag in (("auto", "auto"), ("auto_measured", "measured")):
                r = runs[name]
                pt[f"{tag}_vs_best"] = _ratio(r["tuples_per_s"], best)
                pt[f"{tag}_vs_best_cpu"] = _ratio(r["tuples_per_cpu_s"], best_cpu)
                steps = sum(r["paths"].values())
                pt[f"{tag}_lookup_share"] = sum(v for p, v in r["paths"].items() if p.startswith("lookup")) / steps
                pt[f"{tag}_chose_faster"] = (pt[f"{tag}_lookup_share"] > 0.5) == lookup_faster
            pt["exact_across_modes"] = all(runs[m]["check"] == off["check"] for m in RUNS)
            points.append(pt)
            log(
                f"    {algorithm:8s} w={w:6d}: off {off['tuples_per_s']:,.0f}/s, auto x{pt['auto_rate_ratio']:.2f} "
                f"({pt['auto_lookup_share']:.0%} lookup steps), measured x{pt['auto_measured_rate_ratio']:.2f} "
                f"({pt['measured_lookup_share']:.0%}), always x{pt['always_rate_ratio']:.2f}, "
                f"auto/best {pt['auto_vs_best']:.2f}, measured/best {pt['measured_vs_best']:.2f}, "
                f"same output {pt['exact_across_modes']}"
            )
    return points


def run_database(url: str | sa.URL, size: Size, seed: int, log: Any) -> Json:
    """Build the master in the database at ``url``, calibrate, measure every rate."""
    engine = sa.create_engine(url, pool_pre_ping=True)
    try:
        t = time.perf_counter()
        name = make_master(engine, size.rows, seed)
        log(f"  {engine.dialect.name}: {size.rows:,} master rows in {time.perf_counter() - t:.1f}s")
        b = -(-size.rows // size.k)
        master = CountingMaster(SqlMasterScan(engine, name, "k", b, columns=["k", "attr", "v"], reader="driver"))
        consts, fit = calibrate(master, seed)
        log(f"  fitted: {json.dumps({k: round(v, 2) for k, v in fit.items()})}")
        model = CostModel(consts)
        points = measure(master, model, size.rates, size.reps, seed, log)
        switch = [p["tuples_per_step"] for p in points if p["algorithm"] == "meshjoin" and p["auto_lookup_share"] < 0.5]
        return {
            "database": engine.dialect.name,
            "master_rows": master.num_rows,
            "partitions": master.num_partitions(),
            "partition_rows": b,
            "lookup_batch": master.lookup_batch,
            "reps": size.reps,
            "calibration": fit,
            "points": points,
            "auto_scans_from_tuples_per_step": min(switch) if switch else None,
        }
    finally:
        engine.dispose()


def exp_hybrid(bench: Bench) -> Json:
    """SQLite master: scan only vs auto vs always over stream rates (the registered experiment)."""
    scale = bench.p.name if bench.p.name in SIZES else "small"
    path = bench.work_dir / "hybrid-master.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    return {"sqlite": run_database(f"sqlite:///{path}", SIZES[scale], bench.seed, bench.log)}


def markdown(res: Json) -> str:
    """One table per database."""
    out = []
    for name, db in res.items():
        if not isinstance(db, dict) or "points" not in db:
            continue
        c = db["calibration"]
        out.append(
            f"### {name}: {db['master_rows']:,} rows, k = {db['partitions']}, b = {db['partition_rows']:,}, "
            f"median of {db['reps']} interleaved runs, "
            f"{db['lookup_batch']} keys per IN list\n\n"
            f"Fitted: c_rt {c['c_rt_us']:.1f} us, c_key {c['c_key_us']:.2f} us, "
            f"c_row {c['c_row_us']:.2f} us, c_io_row {c['c_io_row_us']:.2f} us.\n"
        )
        out.append(
            "| algorithm | tuples/step | off tuples/s | off rows/tuple | off trips/tuple | auto: lookup steps "
            "| always/off rows | always/off trips | auto/off rate | always/off rate | auto/off CPU rate "
            "| always/off CPU rate | auto / best | auto / best (CPU) | auto took the faster path "
            "| measured auto: lookup steps | measured auto / best | measured auto took the faster path | same output |"
        )
        out.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|---|---|")
        for p in db["points"]:
            off = p["runs"]["off"]
            out.append(
                f"| {p['algorithm']} | {p['tuples_per_step']} | {off['tuples_per_s']:,.0f} "
                f"| {off['db_rows_per_tuple']:,.1f} | {off['round_trips_per_tuple']:.4f} "
                f"| {p['auto_lookup_share']:.0%} | {p['always_rows_ratio']:.4f} | {p['always_trips_ratio']:.3f} "
                f"| {p['auto_rate_ratio']:.2f} | {p['always_rate_ratio']:.2f} | {p['auto_cpu_ratio']:.2f} "
                f"| {p['always_cpu_ratio']:.2f} | {p['auto_vs_best']:.2f} | {p['auto_vs_best_cpu']:.2f} "
                f"| {'yes' if p['auto_chose_faster'] else 'no'} | {p['measured_lookup_share']:.0%} "
                f"| {p['measured_vs_best']:.2f} | {'yes' if p['measured_chose_faster'] else 'no'} "
                f"| {p['exact_across_modes']} |"
            )
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m ssbj.bench.exp_hybrid [--scale small|full] [--mariadb] [--md F] [--json F]``."""
    ap = argparse.ArgumentParser(prog="python -m ssbj.bench.exp_hybrid")
    ap.add_argument("--scale", choices=sorted(SIZES), default="small")
    ap.add_argument("--mariadb", action="store_true", help="also on a MariaDB server started by ssbj.testing")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--md", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    log = stderr_log()
    res: Json = {}
    with tempfile.TemporaryDirectory(prefix="ssbj-hybrid-") as tmp:
        res["sqlite"] = run_database(f"sqlite:///{Path(tmp) / 'm.sqlite'}", SIZES[args.scale], args.seed, log)
        if args.mariadb:
            server = launch(Path(tmp) / "mariadb")
            try:
                res["mariadb"] = run_database(server.url, SIZES[args.scale], args.seed, log)
            finally:
                server.stop()
    res["seconds"] = time.perf_counter() - t0
    emit(markdown(res), res, args.md, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
