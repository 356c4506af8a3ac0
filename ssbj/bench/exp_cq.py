"""Continuous queries (issue 13): TPC-H Q7 maintained under inserts and deletes.

Per scale factor, in one process: the Cquirrel engine (:mod:`ssbj.cq`) loads every
tuple of Q7's relations in a random interleaving (children before parents included),
then takes an update stream (lineitems and orders deleted and inserted again, customers
moving to another nation as delete + insert) in micro-batches of 1k, 10k and 100k
changes.  The baselines see the same batches: DuckDB (one thread, as the engine uses
one core) applying each batch to its tables and recomputing Q7, and a naive delta join
(per relation of the batch, ΔQ = Q7 with that relation replaced by its signed delta and
the others as they are, in DuckDB, merged into a kept answer) - first-order incremental
maintenance without live-tuple indexes.  All three answers are compared at the end.
Read the ratios, not the absolute numbers (a small, shared machine): every batch is timed
as wall time and as the process's CPU time (``time.process_time``: what a busy machine's
scheduler takes away from the wall time does not count), the ratios are given on both.

After both scale factors ran, their engines stay in memory and take further update
batches *interleaved* (SF 0.1, SF 1, SF 1, SF 0.1, ...), so the machine's load hits both
alike: per-change cost per scale factor as medians with their spread, the ratio of the
medians and the median of the paired ratios.  What could grow with the scale factor is
recorded next to it: the join results per change (the work), the hash's probe length,
the state's bytes, and the machine's latency of a dependent random load over a working
set of the state's size (:mod:`ssbj.bench.memlat`).
"""

from __future__ import annotations

import resource
import subprocess
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ssbj.bench.datagen import _plain_strings, tpchgen_binary
from ssbj.bench.harness import Bench, Json
from ssbj.bench.memlat import chase_ns
from ssbj.cq.kernels import probe_lengths
from ssbj.cq.maintainer import ContinuousQuery
from ssbj.cq.query import plan_query
from ssbj.cq.schema import parse_schema
from ssbj.errors import DependencyError

RELS = ("nation", "supplier", "customer", "orders", "lineitem")
PK = {"nation": "n_nationkey", "supplier": "s_suppkey", "customer": "c_custkey", "orders": "o_orderkey"}
BATCHES = (1_000, 10_000, 100_000)
SETTINGS: dict[str, dict[str, Any]] = {  # scale factors, update changes per batch size, baseline batches per batch size
    # interleave: batches per size that the engines of both scale factors take in turns at the end
    "small": {
        "sfs": (0.01, 0.1),
        "updates": 20_000,
        "baseline_batches": {1_000: 5, 10_000: 2, 100_000: 1},
        "interleave": {1_000: 10, 10_000: 3},
    },
    "full": {
        "sfs": (0.1, 1.0),
        "updates": 200_000,
        "baseline_batches": {1_000: 10, 10_000: 5, 100_000: 2},
        "interleave": {1_000: 60, 10_000: 20, 100_000: 4},
    },
}
CUSTOMERS_PER_SF = 150_000  # TPC-H: customers = SF x 150,000
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cq"

# Q7 as one flat join (the example file's derived-table form, unfolded), with {name} slots for deltas
_Q7_FLAT = """
select n1.n_name as supp_nation, n2.n_name as cust_nation, extract(year from l_shipdate) as l_year,
       sum({sign}l_extendedprice * (1 - l_discount)) as revenue
from {supplier} s, {lineitem} l, {orders} o, {customer} c, {nation} n1, {nation2} n2
where s.s_suppkey = l.l_suppkey and o.o_orderkey = l.l_orderkey and c.c_custkey = o.o_custkey
  and s.s_nationkey = n1.n_nationkey and c.c_nationkey = n2.n_nationkey
  and ((n1.n_name = 'FRANCE' and n2.n_name = 'GERMANY') or (n1.n_name = 'GERMANY' and n2.n_name = 'FRANCE'))
  and l_shipdate between date '1995-01-01' and date '1996-12-31'
group by all
"""


def tpch_q7_data(scale: float, out: Path) -> dict[str, pa.Table]:
    """Q7's TPC-H tables at ``scale`` (tpchgen-cli, kept in ``out``)."""
    out.mkdir(parents=True, exist_ok=True)
    if not all((out / f"{t}.parquet").exists() for t in RELS):
        cmd = [tpchgen_binary(), "parquet", "-s", f"{scale:g}", f"--tables={','.join(RELS)}", f"--output-dir={out}"]
        proc = subprocess.run([*cmd, "--no-progress", "--quiet"], capture_output=True, text=True, check=False)  # noqa: S603
        if proc.returncode != 0:
            raise DependencyError(f"tpchgen-cli failed ({proc.returncode}): {proc.stderr.strip()}")
    return {t: _plain_strings(pq.read_table(out / f"{t}.parquet")) for t in RELS}


class Stream:
    """Changes as (relation index, row of that relation's version table, op), in order; ``_seq`` = position."""

    def __init__(self, versions: dict[str, pa.Table]) -> None:
        self.versions = versions
        self.rel = np.zeros(0, np.int8)
        self.row = np.zeros(0, np.int64)
        self.ins = np.zeros(0, bool)

    def extend(self, rel: np.ndarray, row: np.ndarray, ins: np.ndarray) -> None:
        """Append changes."""
        self.rel = np.concatenate([self.rel, rel.astype(np.int8)])
        self.row = np.concatenate([self.row, row.astype(np.int64)])
        self.ins = np.concatenate([self.ins, ins.astype(bool)])

    def frames(self, lo: int, hi: int) -> dict[str, pa.Table]:
        """Return changes ``lo..hi`` as one table per relation with ``_op`` and ``_seq``."""
        out = {}
        rel, row, ins = self.rel[lo:hi], self.row[lo:hi], self.ins[lo:hi]
        seq = np.arange(lo, hi, dtype=np.int64)
        for r, name in enumerate(RELS):
            m = rel == r
            if not m.any():
                continue
            t = self.versions[name].take(pa.array(row[m]))
            ops = pa.array(np.where(ins[m], "+", "-"))
            out[name] = t.append_column("_op", ops).append_column("_seq", pa.array(seq[m]))
        return out


def build_stream(
    data: dict[str, pa.Table], updates: int, rng: np.random.Generator, move_share: float = 0.1
) -> tuple[Stream, int]:
    """Build the load (every row, random interleaving), then ``updates`` changes; also the load's length.

    ``move_share`` of the update changes are customers moving (a delete and an insert each),
    at most half the customers; the rest are lineitems (80%) and orders deleted and inserted again.
    """
    cust = data["customer"]
    n_moves = max(1, min(int(updates * move_share) // 2, cust.num_rows // 2))
    moved_idx = rng.choice(cust.num_rows, size=n_moves, replace=False)
    moved = cust.take(pa.array(moved_idx))
    new_nation = rng.integers(0, 25, size=n_moves)
    i = moved.schema.get_field_index("c_nationkey")
    moved = moved.set_column(i, cust.schema.field(i), pa.array(new_nation, pa.int64()))
    versions = dict(data)
    versions["customer"] = pa.concat_tables([cust, moved])
    s = Stream(versions)
    sizes = [data[r].num_rows for r in RELS]
    rel = np.repeat(np.arange(len(RELS)), sizes)
    row = np.concatenate([np.arange(n) for n in sizes])
    perm = rng.permutation(len(rel))
    s.extend(rel[perm], row[perm], np.ones(len(rel), bool))
    n_load = len(rel)
    # updates: pairs (delete, insert again) of distinct lineitems (80%) and orders (20%), and the moves
    pairs = (updates - 2 * n_moves) // 2
    li = rng.choice(data["lineitem"].num_rows, size=int(pairs * 0.8), replace=False)
    od = rng.choice(data["orders"].num_rows, size=pairs - len(li), replace=False)
    u_rel = np.concatenate([np.full(len(li), 4), np.full(len(od), 3), np.full(n_moves, 2)])
    u_old = np.concatenate([li, od, moved_idx])
    u_new = np.concatenate([li, od, cust.num_rows + np.arange(n_moves)])
    order = rng.permutation(len(u_rel))
    u_rel, u_old, u_new = u_rel[order], u_old[order], u_new[order]
    # each pair's insert follows its delete within ~500 changes (spans batch boundaries at 1k)
    t_del = np.arange(len(u_rel)) * 2.0
    t_ins = t_del + 1 + rng.integers(0, 500, size=len(u_rel))
    t = np.concatenate([t_del, t_ins])
    o = np.argsort(t, kind="stable")
    s.extend(
        np.concatenate([u_rel, u_rel])[o],
        np.concatenate([u_old, u_new])[o],
        np.concatenate([np.zeros(len(u_rel), bool), np.ones(len(u_rel), bool)])[o],
    )
    return s, n_load


def _answer(rows: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], Decimal]:
    return {tuple(r[:3]): Decimal(r[3]) for r in rows if r[3] is not None and r[3] != 0}


class DuckState:
    """Q7's tables in DuckDB (one thread), kept current batch by batch."""

    def __init__(self, stream: Stream, n_load: int) -> None:
        self.con = duckdb.connect()
        self.con.execute("set threads=1")
        self.stream = stream
        load = stream.frames(0, n_load)
        for name in RELS:
            src = load[name].drop_columns(["_op", "_seq"]) if name in load else stream.versions[name].slice(0, 0)
            self.con.register("src", src)
            self.con.execute(f"create table {name} as select * from src")  # noqa: S608 - fixed names
            self.con.unregister("src")

    def apply(self, frames: dict[str, pa.Table], name: str) -> None:
        """Apply one relation's changes of a batch (deletes by key, then inserts)."""
        t = frames[name]
        dels = t.filter(pc.equal(t.column("_op"), "-"))
        ins = t.filter(pc.equal(t.column("_op"), "+")).drop_columns(["_op", "_seq"])
        if dels.num_rows:
            self.con.register("d", dels)
            if name == "lineitem":
                self.con.execute(
                    "delete from lineitem where (l_orderkey, l_linenumber) in "
                    "(select (l_orderkey, l_linenumber) from d)"
                )
            else:
                self.con.execute(f"delete from {name} where {PK[name]} in (select {PK[name]} from d)")  # noqa: S608
            self.con.unregister("d")
        if ins.num_rows:
            self.con.register("i", ins)
            self.con.execute(f"insert into {name} select * from i")  # noqa: S608
            self.con.unregister("i")

    def q7(self) -> list[tuple[Any, ...]]:
        """Q7 on the current tables."""
        return self.con.execute((EXAMPLES / "q7.sql").read_text()).fetchall()


def _delta_join_rows(db: DuckState, frames: dict[str, pa.Table], answer: dict[tuple[Any, ...], Decimal]) -> None:
    """ΔQ per changed relation (the others as they are then), merged into ``answer``; then the relation is updated."""
    for name in RELS:
        if name not in frames:
            continue
        t = frames[name]
        sign = pa.array(np.where(np.asarray(pc.equal(t.column("_op"), "+")), 1, -1), pa.int8())
        delta = t.append_column("_sign", sign)
        base = {r: r for r in RELS} | {"nation2": "nation"}
        if name == "nation":
            queries = [dict(base, nation="delta", sign="n1._sign * "), dict(base, nation2="delta", sign="n2._sign * ")]
        else:
            queries = [dict(base, **{name: "delta"}, sign="_sign * ")]
        for i, q in enumerate(queries):
            if name == "nation" and i == 1:
                db.apply(frames, name)  # the second copy's delta joins the first copy's new state
            db.con.register("delta", delta)
            rows = db.con.execute(_Q7_FLAT.format(**q)).fetchall()
            db.con.unregister("delta")
            for *key, rev in rows:
                k = tuple(key)
                answer[k] = answer.get(k, Decimal(0)) + Decimal(rev)
        if name != "nation":
            db.apply(frames, name)


class _Timer:
    """Wall and CPU seconds of the timed blocks, one entry per block."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def __enter__(self) -> _Timer:
        self._w, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall.append(time.perf_counter() - self._w)
        self.cpu.append(time.process_time() - self._c)


def _interleave_changes(cfg: dict[str, Any]) -> int:
    return sum(b * n for b, n in cfg["interleave"].items())


def _move_share(cfg: dict[str, Any], updates: int) -> float:
    """Return the customer moves' share of the update changes, the same at every scale factor.

    A customer moves at most once, so the smallest scale factor caps the share; the same
    mix at every scale factor keeps the per-change costs comparable.
    """
    return min(0.1, 2 * (int(CUSTOMERS_PER_SF * min(cfg["sfs"])) // 2) / updates)


def _run_sf(bench: Bench, sf: float, cfg: dict[str, Any]) -> tuple[Json, tuple[ContinuousQuery, Stream, int]]:
    data = tpch_q7_data(sf, bench.work_dir / f"tpch-q7-sf{sf:g}")
    rng = np.random.default_rng(bench.seed)
    updates = cfg["updates"] * len(BATCHES) + _interleave_changes(cfg)
    stream, n_load = build_stream(data, updates, rng, _move_share(cfg, updates))
    schema = parse_schema((EXAMPLES / "tpch_schema.sql").read_text())
    plan = plan_query((EXAMPLES / "q7.sql").read_text(), schema)
    # compile the engine's kernels outside the timed blocks (numba compiles on first call)
    ContinuousQuery(plan).apply(stream.frames(0, min(n_load, 10_000)))
    cq = ContinuousQuery(plan)
    res: Json = {"scale_factor": sf, "rows": {r: data[r].num_rows for r in RELS}, "load_changes": n_load}
    # -- the load, 10k changes a batch (frames are built outside the timed region)
    busy = 0.0
    for lo in range(0, n_load, 10_000):
        frames = stream.frames(lo, min(lo + 10_000, n_load))
        t0 = time.perf_counter()
        cq.apply(frames)
        busy += time.perf_counter() - t0
    res["load"] = {"seconds": busy, "changes_per_second": n_load / busy, "us_per_change": 1e6 * busy / n_load}
    bench.log(f"cq sf={sf:g}: load {n_load:,} changes at {n_load / busy:,.0f}/s")
    res["engine"] = cq.engine
    if sf <= 0.1 or cq.fast is not None:  # the dict engine's walk of every object takes minutes at SF 1
        res["state_nbytes"] = cq.nbytes()
    db = DuckState(stream, n_load)
    delta_db = DuckState(stream, n_load)
    delta_answer = _answer(delta_db.q7())
    pos = n_load
    points = []
    for b in BATCHES:
        seg_end = pos + cfg["updates"]
        t_cq, t_re, t_dj = _Timer(), _Timer(), _Timer()
        dj_exact = None
        n_base = cfg["baseline_batches"][b]
        for k, lo in enumerate(range(pos, seg_end, b)):
            frames = stream.frames(lo, min(lo + b, seg_end))
            with t_cq:
                cq.apply(frames)
            # the baselines see every batch (they must stay current) but are timed on the first few only
            with t_re:
                for name in RELS:
                    if name in frames:
                        db.apply(frames, name)
                if k < n_base:
                    db.q7()
            if k < n_base:
                with t_dj:
                    _delta_join_rows(delta_db, frames, delta_answer)
                if k == n_base - 1:  # untimed: the delta join's answer is exact (the baseline is right)
                    dj_exact = {k: v for k, v in delta_answer.items() if v != 0} == _answer(delta_db.q7())
            else:
                for name in RELS:
                    if name in frames:
                        delta_db.apply(frames, name)
        delta_answer = _answer(delta_db.q7())
        n = seg_end - pos
        cq_batch = float(np.mean(t_cq.wall))
        re_batch = float(np.mean(t_re.wall[:n_base]))
        dj_batch = float(np.mean(t_dj.wall[:n_base]))
        cq_cpu = float(np.mean(t_cq.cpu))
        re_cpu = float(np.mean(t_re.cpu[:n_base]))
        dj_cpu = float(np.mean(t_dj.cpu[:n_base]))
        points.append(
            {
                "batch": b,
                "changes": n,
                "cq_changes_per_second": n / sum(t_cq.wall),
                "cq_us_per_change": 1e6 * sum(t_cq.wall) / n,
                "cq_seconds_per_batch": cq_batch,
                "cq_median_seconds_per_batch": float(np.median(t_cq.wall)),
                "recompute_seconds_per_batch": re_batch,
                "delta_join_seconds_per_batch": dj_batch,
                "speedup_vs_recompute": re_batch / cq_batch,
                "speedup_vs_delta_join": dj_batch / cq_batch,
                "cpu": {
                    "cq_changes_per_second": n / sum(t_cq.cpu),
                    "cq_us_per_change": 1e6 * sum(t_cq.cpu) / n,
                    "cq_seconds_per_batch": cq_cpu,
                    "recompute_seconds_per_batch": re_cpu,
                    "delta_join_seconds_per_batch": dj_cpu,
                    "speedup_vs_recompute": re_cpu / cq_cpu,
                    "speedup_vs_delta_join": dj_cpu / cq_cpu,
                },
                "baseline_batches_timed": n_base,
                "delta_join_exact": dj_exact,
            }
        )
        rate, rate_cpu = n / sum(t_cq.wall), n / sum(t_cq.cpu)
        ratios = f"x{re_batch / cq_batch:.1f} vs recompute (CPU x{re_cpu / cq_cpu:.1f})"
        ratios += f", x{dj_batch / cq_batch:.1f} vs delta join"
        bench.log(f"cq sf={sf:g} batch={b}: {rate:,.0f} changes/s (CPU time {rate_cpu:,.0f}/s), {ratios}")
        pos = seg_end
    res["updates"] = points
    engine = {tuple(r.values())[:3]: tuple(r.values())[3] for r in cq.result().to_pylist()}
    duck = _answer(db.q7())
    res["answers_equal"] = {
        "engine_vs_duckdb": engine == duck,
        "delta_join_vs_duckdb": {k: v for k, v in delta_answer.items() if v != 0} == duck,
    }
    res["answer_rows"] = len(duck)
    res["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return res, (cq, stream, pos)


def _spread(values: list[float]) -> Json:
    q = np.percentile(values, [10, 25, 50, 75, 90])
    return {"median": float(q[2]), "p25": float(q[1]), "p75": float(q[3]), "p10": float(q[0]), "p90": float(q[4])}


def _interleaved(bench: Bench, cfg: dict[str, Any], sfs: tuple[float, ...], live: list[Any]) -> Json:
    """Further update batches, the scale factors' engines in turns (ABBA); µs per change per batch, wall and CPU."""
    out: Json = {}
    pos = [p for _, _, p in live]
    for b, reps in cfg["interleave"].items():
        us: dict[float, dict[str, list[float]]] = {sf: {"wall": [], "cpu": [], "join_rows": []} for sf in sfs}
        for rep in range(reps):
            order = range(len(sfs)) if rep % 2 == 0 else reversed(range(len(sfs)))
            for i in order:
                cq, stream, _ = live[i]
                frames = stream.frames(pos[i], pos[i] + b)
                pos[i] += b
                rows0 = cq.join_rows
                t = _Timer()
                with t:
                    cq.apply(frames)
                us[sfs[i]]["wall"].append(1e6 * t.wall[0] / b)
                us[sfs[i]]["cpu"].append(1e6 * t.cpu[0] / b)
                us[sfs[i]]["join_rows"].append((cq.join_rows - rows0) / b)
        lo, hi = sfs[0], sfs[-1]
        point: Json = {"batches_per_sf": reps}
        for clock in ("wall", "cpu"):
            paired = [h / lo_ for lo_, h in zip(us[lo][clock], us[hi][clock], strict=True)]
            point[clock] = {
                **{f"sf{sf:g}_us_per_change": _spread(us[sf][clock]) for sf in sfs},
                "ratio_of_medians": float(np.median(us[hi][clock]) / np.median(us[lo][clock])),
                "paired_ratio": _spread(paired),
            }
        point["join_rows_per_change"] = {f"sf{sf:g}": float(np.mean(us[sf]["join_rows"])) for sf in sfs}
        out[str(b)] = point
        c = point["cpu"]
        bench.log(
            f"cq interleaved batch={b}: CPU µs/change median sf{lo:g} {c[f'sf{lo:g}_us_per_change']['median']:.2f}, "
            f"sf{hi:g} {c[f'sf{hi:g}_us_per_change']['median']:.2f}, ratio {c['ratio_of_medians']:.2f} "
            f"(paired {c['paired_ratio']['p25']:.2f}-{c['paired_ratio']['p75']:.2f})"
        )
    # what grows with the state: probe length of the hash, bytes, the latency of a random load at that size
    growth: Json = {}
    for sf, (cq, _, _) in zip(sfs, live, strict=True):
        fast = cq.fast
        probes = probe_lengths(fast.hk) if fast is not None else np.ones(1)
        nbytes = cq.nbytes()
        growth[f"sf{sf:g}"] = {
            "state_bytes": nbytes,
            "hash_rows": 0 if fast is None else len(fast.hk),
            "hash_load": 0.0 if fast is None else float(fast.cnt[0] / len(fast.hk)),
            "mean_probe_rows": float(probes.mean()),
            "tuple_slots": 0 if fast is None else int(fast.cnt[2]),
        }
    lat: dict[str, list[float]] = {k: [] for k in growth}
    for _ in range(3):  # in turns as well
        for key, g in growth.items():
            lat[key].append(chase_ns(int(g["state_bytes"])))
    for key, g in growth.items():
        g["random_load_ns"] = _spread(lat[key])
    out["growth"] = growth
    return out


def exp_cq(bench: Bench) -> Json:
    """Q7 under inserts and deletes: engine vs DuckDB recompute vs naive delta join, per scale factor."""
    cfg = SETTINGS.get(bench.p.name, SETTINGS["small"])
    runs, live = [], []
    for sf in cfg["sfs"]:
        res, state = _run_sf(bench, sf, cfg)
        runs.append(res)
        live.append(state)
    interleaved = _interleaved(bench, cfg, cfg["sfs"], live)
    lo, hi = runs[0], runs[-1]
    summary: Json = {
        "load_us_per_change_ratio_large_over_small": hi["load"]["us_per_change"] / lo["load"]["us_per_change"],
        "update_us_per_change_ratio_large_over_small": {
            str(p_hi["batch"]): p_hi["cq_us_per_change"] / p_lo["cq_us_per_change"]
            for p_lo, p_hi in zip(lo["updates"], hi["updates"], strict=True)
        },
        "speedup_vs_recompute_at_10k_largest_sf": next(
            p["speedup_vs_recompute"] for p in hi["updates"] if p["batch"] == 10_000
        ),
        "speedup_vs_recompute_at_10k_largest_sf_cpu": next(
            p["cpu"]["speedup_vs_recompute"] for p in hi["updates"] if p["batch"] == 10_000
        ),
        "interleaved_cpu_ratio_of_medians": {
            b: v["cpu"]["ratio_of_medians"] for b, v in interleaved.items() if b != "growth"
        },
        "min_changes_per_second": min(
            [r["load"]["changes_per_second"] for r in runs]
            + [p["cq_changes_per_second"] for r in runs for p in r["updates"]]
        ),
    }
    settings = {k: v for k, v in cfg.items() if k not in ("baseline_batches", "interleave")}
    return {"runs": runs, "interleaved": interleaved, "summary": summary, "settings": settings}
