"""Exactness of the continuous-query engine at scale (issue 13): Q7 equal to DuckDB after every batch.

The seed paper's accuracy test, at the preset's TPC-H scale factors: insert the first half
of every relation (all of nation, so that Q7's nation pair stays) in one random
interleaving of all relations (children before their parents included); then insert
each tuple of the second half and delete it again later; then customers move to another
nation (a delete and an insert each).  After every
micro-batch the engine's answer is compared with Q7 run by DuckDB on the tables as they
are then (kept current batch by batch, :class:`ssbj.bench.exp_cq.DuckState`), and at the
end with Q7 run on a fresh copy of the first half with the moves applied: the paper's
"the result equals Q7 on the first half".  Nothing here is timed for a ratio; the run
records how many batches were compared and every mismatch.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ssbj.bench.exp_cq import EXAMPLES, PK, RELS, DuckState, Stream, tpch_q7_data
from ssbj.bench.harness import Bench, Json
from ssbj.cq.maintainer import ContinuousQuery
from ssbj.cq.query import plan_query
from ssbj.cq.schema import parse_schema

SETTINGS: dict[str, dict[str, Any]] = {
    # batch: changes per micro-batch at each scale factor (~100-230 batches each)
    "small": {"sfs": (0.01,), "batch": {0.01: 5_000}, "moves": 500},
    "full": {"sfs": (0.1, 1.0), "batch": {0.1: 10_000, 1.0: 50_000}, "moves": 20_000},
}
_LAG = 0.05  # a second-half tuple's delete follows its insert by up to this share of the phase


def paper_stream(data: dict[str, pa.Table], moves: int, rng: np.random.Generator) -> tuple[Stream, dict[str, Any]]:
    """Build the changes: first half inserted; second half inserted and deleted; then ``moves`` customers move.

    Also returns what the final answer must be computed over: each relation's first-half
    row indices, and the moved customers' original and new version rows.
    """
    cust = data["customer"]
    first: dict[str, np.ndarray] = {}
    f_rel, f_row, s_rel, s_row = [], [], [], []
    for r, name in enumerate(RELS):
        n = data[name].num_rows
        # nation (25 rows) stays whole: halved, Q7's FRANCE/GERMANY pair would mostly leave the answer empty
        in_first = np.ones(n, bool) if name == "nation" else rng.permutation(n) < (n + 1) // 2
        first[name] = np.flatnonzero(in_first)
        second = np.flatnonzero(~in_first)
        f_rel.append(np.full(len(first[name]), r))
        f_row.append(first[name])
        s_rel.append(np.full(len(second), r))
        s_row.append(second)
    rel1, row1 = np.concatenate(f_rel), np.concatenate(f_row)
    p1 = rng.permutation(len(rel1))
    rel2, row2 = np.concatenate(s_rel), np.concatenate(s_row)
    t_ins = rng.random(len(rel2))
    t_del = t_ins + _LAG * rng.random(len(rel2)) + 1e-12
    o2 = np.argsort(np.concatenate([t_ins, t_del]), kind="stable")
    # moves: customers of the first half, each to a random nation, deleted then inserted at once
    n_moves = min(moves, len(first["customer"]))
    moved_idx = rng.choice(first["customer"], size=n_moves, replace=False)
    moved = cust.take(pa.array(moved_idx))
    i = moved.schema.get_field_index("c_nationkey")
    moved = moved.set_column(i, cust.schema.field(i), pa.array(rng.integers(0, 25, size=n_moves), pa.int64()))
    versions = dict(data)
    versions["customer"] = pa.concat_tables([cust, moved])
    new_rows = cust.num_rows + np.arange(n_moves)
    stream = Stream(versions)
    stream.extend(rel1[p1], row1[p1], np.ones(len(rel1), bool))
    stream.extend(
        np.concatenate([rel2, rel2])[o2],
        np.concatenate([row2, row2])[o2],
        np.concatenate([np.ones(len(rel2), bool), np.zeros(len(rel2), bool)])[o2],
    )
    c = RELS.index("customer")
    stream.extend(
        np.full(2 * n_moves, c),
        np.column_stack([moved_idx, new_rows]).ravel(),
        np.tile([False, True], n_moves),
    )
    return stream, {"first": first, "moved_from": moved_idx, "moved_to": new_rows}


def _apply_net(db: DuckState, changes: pa.Table, name: str) -> None:
    """Apply one relation's changes of a batch to DuckDB by their net effect, in ``_seq`` order.

    A tuple inserted and deleted within one batch must not stay (``DuckState.apply`` runs a
    batch's deletes before its inserts, which the update streams of ``exp_cq`` allow): every
    key the batch touches is deleted, then each key's last version is inserted if its last
    change is an insert.
    """
    key = "l_orderkey, l_linenumber" if name == "lineitem" else PK[name]
    cols = ", ".join(f for f in changes.column_names if f not in ("_op", "_seq"))
    db.con.register("c", changes)
    db.con.execute(f"delete from {name} where ({key}) in (select ({key}) from c)")  # noqa: S608 - fixed names
    db.con.execute(
        f"insert into {name} select {cols} from "  # noqa: S608 - fixed names
        f"(select *, row_number() over (partition by {key} order by _seq desc) as rn from c) "
        "where rn = 1 and _op = '+'"
    )
    db.con.unregister("c")


def _rows(table: pa.Table | list[tuple[Any, ...]]) -> dict[tuple[Any, ...], Decimal]:
    """Q7's answer as {(supp_nation, cust_nation, l_year): revenue}; a repeated group is an error."""
    rows = [tuple(r.values()) for r in table.to_pylist()] if isinstance(table, pa.Table) else table
    out = {tuple(r[:3]): Decimal(r[3]) for r in rows}
    if len(out) != len(rows):
        raise AssertionError(f"a group appears twice in {rows}")
    return out


def _first_half_answer(stream: Stream, final: dict[str, Any]) -> dict[tuple[Any, ...], Decimal]:
    """Q7 by DuckDB on a fresh copy of the first half, the moved customers in their new versions."""
    con = duckdb.connect()
    con.execute("set threads=1")
    for name in RELS:
        rows = final["first"][name]
        if name == "customer":
            keep = np.setdiff1d(rows, final["moved_from"])
            rows = np.concatenate([keep, final["moved_to"]])
        con.register("src", stream.versions[name].take(pa.array(rows)))
        con.execute(f"create table {name} as select * from src")  # noqa: S608 - fixed names
        con.unregister("src")
    return _rows(con.execute((EXAMPLES / "q7.sql").read_text()).fetchall())


def _run_sf(bench: Bench, sf: float, cfg: dict[str, Any]) -> Json:
    data = tpch_q7_data(sf, bench.work_dir / f"tpch-q7-sf{sf:g}")
    stream, final = paper_stream(data, cfg["moves"], np.random.default_rng(bench.seed))
    plan = plan_query((EXAMPLES / "q7.sql").read_text(), parse_schema((EXAMPLES / "tpch_schema.sql").read_text()))
    cq = ContinuousQuery(plan)
    db = DuckState(stream, 0)
    total, batch = len(stream.rel), cfg["batch"][sf]
    mismatches: list[Json] = []
    checked, engine_s, duck_s, most_groups = 0, 0.0, 0.0, 0
    for lo in range(0, total, batch):
        hi = min(lo + batch, total)
        frames = stream.frames(lo, hi)
        t0 = time.perf_counter()
        delta = cq.apply(frames)
        engine_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        for name in RELS:
            if name in frames:
                _apply_net(db, frames[name], name)
        want = _rows(db.q7())
        duck_s += time.perf_counter() - t0
        got = _rows(cq.result())
        checked += 1
        most_groups = max(most_groups, len(want))
        if got != want or delta.applied != hi or cq.dead_letters:  # applied: changes so far
            mismatches.append(
                {"batch": checked - 1, "seq": [lo, hi], "applied": delta.applied, "dead_letters": len(cq.dead_letters)}
                | {"missing": len(set(want) - set(got)), "extra": len(set(got) - set(want))}
            )
    got = _rows(cq.result())
    expected = _first_half_answer(stream, final)
    res: Json = {
        "scale_factor": sf,
        "changes": total,
        "batch": batch,
        "batches_compared": checked,
        "mismatches": mismatches[:20],
        "mismatched_batches": len(mismatches),
        "most_groups": most_groups,
        "final_groups": len(got),
        "final_equals_q7_on_first_half": got == expected,
        "customer_moves": len(final["moved_from"]),
        "engine_seconds": engine_s,
        "duckdb_seconds": duck_s,
    }
    ok = not mismatches and res["final_equals_q7_on_first_half"]
    bench.log(
        f"cq_exact sf={sf:g}: {total:,} changes, {checked} batches of {batch:,} compared with DuckDB, "
        f"{len(mismatches)} mismatched, final = Q7(first half): {res['final_equals_q7_on_first_half']}"
        f" -> {'exact' if ok else 'NOT EXACT'}"
    )
    return res


def exp_cq_exact(bench: Bench) -> Json:
    """Run the paper's accuracy test plus customer moves at the preset's scale factors, compared after every batch."""
    cfg = SETTINGS.get(bench.p.name, SETTINGS["small"])
    runs = [_run_sf(bench, sf, cfg) for sf in cfg["sfs"]]
    return {
        "runs": runs,
        "all_exact": all(r["mismatched_batches"] == 0 and r["final_equals_q7_on_first_half"] for r in runs),
        "settings": {**cfg, "batch": {f"{sf:g}": b for sf, b in cfg["batch"].items()}},
    }
