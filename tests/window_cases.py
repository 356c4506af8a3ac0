"""Two streams joined within an event-time window plus two masters, and DuckDB's answer (SQL by hand)."""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.multiway import JoinEdge, MasterInput, MultiWayJoin, MultiWaySpec, OutputColumn, StreamWindow

T0 = datetime(2026, 1, 1)

WINDOW_SQL = """
    SELECT o.id AS oid, c.id AS cid, o.ts AS ots, c.ts AS cts, u.name AS uname, p.title AS ptitle
    FROM o
    {jw} JOIN c ON c.user_id = o.user_id
        AND c.ts BETWEEN o.ts - INTERVAL '{lo}' SECOND AND o.ts + INTERVAL '{hi}' SECOND AND c.kind <> 0
    {j0} JOIN users u ON u.uid = o.user_id
    {j1} JOIN pages p ON p.pid = c.page
"""


@dataclass
class WindowCase:
    spec: MultiWaySpec
    sql: str
    batches: list[tuple[str, pa.Table]]  # (stream alias, batch) in arrival order
    masters: dict[str, pa.Table]
    lateness: int  # seconds


def _stream(rng: np.random.Generator, n: int, lateness: int, late_frac: float, users: int, ids: int) -> pa.Table:
    """Rows in arrival order; each at most ``lateness`` seconds behind the largest time so far, unless late."""
    base = np.cumsum(rng.integers(0, 4, n))
    behind = rng.integers(0, lateness + 1, n)
    late = rng.random(n) < late_frac
    behind = np.where(late, behind + lateness + 1 + rng.integers(0, 5, n), behind)
    secs = base - behind
    ts = [T0 + timedelta(seconds=int(s)) for s in secs]
    ts_mask = rng.random(n) < 0.05
    uid = rng.integers(0, users, n)
    uid_mask = rng.random(n) < 0.1
    return pa.table(
        {
            "id": pa.array(np.arange(ids, ids + n), pa.int64()),
            "user_id": pa.array(uid, pa.int64(), mask=uid_mask),
            "ts": pa.array(ts, pa.timestamp("us"), mask=ts_mask),
            "page": pa.array(rng.integers(0, 6, n), pa.int32()),
            "kind": pa.array(rng.integers(0, 4, n), pa.int8()),
        }
    )


def window_case(
    seed: int, kinds: tuple[str, str], late_frac: float = 0.0, n: int = 80, window_kind: str = "inner"
) -> WindowCase:
    rng = np.random.default_rng(seed)
    lateness = int(rng.integers(0, 8))
    lo, hi = int(rng.integers(0, 15)), int(rng.integers(0, 15))
    users = int(rng.integers(2, 8))
    o = _stream(rng, n, lateness, late_frac, users, 0).drop_columns(["page", "kind"])
    c = _stream(rng, n, lateness, late_frac, users, 10_000)
    masters = {
        "users": pa.table(
            {
                "uid": pa.array(np.repeat(np.arange(users - 1), 2), pa.int64()),
                "name": [f"u{i}" for i in range(2 * (users - 1))],
            }
        ),
        "pages": pa.table({"pid": pa.array([0, 1, 2, 2, 3], pa.int32()), "title": ["p0", "p1", "p2", "p2b", "p3"]}),
    }
    # batches of random sizes, interleaved at random (each stream's own order kept)
    cut = {a: list(np.cumsum(rng.integers(1, 12, n))) for a in "oc"}
    pieces: dict[str, list[pa.Table]] = {}
    for a, t in (("o", o), ("c", c)):
        starts = [0, *[x for x in cut[a] if x < n]]
        pieces[a] = [t.slice(s, e - s) for s, e in zip(starts, [*starts[1:], n], strict=True)]
    batches: list[tuple[str, pa.Table]] = []
    while pieces["o"] or pieces["c"]:
        a = "o" if not pieces["c"] or (pieces["o"] and rng.random() < 0.5) else "c"
        batches.append((a, pieces[a].pop(0)))
    spec = MultiWaySpec(
        stream="o",
        stream_columns=("id", "ts", "user_id"),
        masters=(MasterInput("u", "users", ("name",)), MasterInput("p", "pages", ("title",))),
        edges=(
            JoinEdge("u", "o", ("user_id",), ("uid",), kinds[0]),  # type: ignore[arg-type]
            JoinEdge("p", "c", ("page",), ("pid",), kinds[1]),  # type: ignore[arg-type]
        ),
        output=(
            OutputColumn("oid", "o", "id"),
            OutputColumn("cid", "c", "id"),
            OutputColumn("ots", "o", "ts"),
            OutputColumn("cts", "c", "ts"),
            OutputColumn("uname", "u", "name"),
            OutputColumn("ptitle", "p", "title"),
        ),
        filters={"c": pc.field("kind") != 0},
        window=StreamWindow(
            stream="c",
            columns=("id", "ts", "page"),
            keys=("user_id",),
            probe_keys=("user_id",),
            time="ts",
            probe_time="ts",
            lower=timedelta(seconds=lo),
            upper=timedelta(seconds=hi),
            lateness=timedelta(seconds=lateness),
            kind=window_kind,  # type: ignore[arg-type]
        ),
    )
    sql = WINDOW_SQL.format(
        jw="" if window_kind == "inner" else "LEFT",
        lo=lo,
        hi=hi,
        j0="" if kinds[0] == "inner" else "LEFT",
        j1="" if kinds[1] == "inner" else "LEFT",
    )
    return WindowCase(spec, sql, batches, masters, lateness)


def late_rows(case: WindowCase) -> dict[str, set[int]]:
    """Ids of the rows late on arrival: time below (largest time of earlier on-time rows) - lateness.

    Only rows passing their stream's filter count, as in the operator.
    """
    top: dict[str, datetime | None] = {"o": None, "c": None}
    late: dict[str, set[int]] = {"o": set(), "c": set()}
    for a, b in case.batches:
        m = top[a]
        wm = None if m is None else m - timedelta(seconds=case.lateness)
        on_time = []
        kinds = b.column("kind").to_pylist() if a == "c" else [1] * b.num_rows
        for i, t, k in zip(b.column("id").to_pylist(), b.column("ts").to_pylist(), kinds, strict=True):
            if k == 0:  # the stream's own filter (c.kind <> 0) comes first: no part in its watermark
                continue
            if t is not None and wm is not None and t < wm:
                late[a].add(i)
            elif t is not None:
                on_time.append(t)
        if on_time:
            top[a] = max(on_time) if m is None else max(m, *on_time)
    return late


def duckdb_answer(case: WindowCase, without: dict[str, set[int]] | None = None) -> Counter[tuple[Any, ...]]:
    """DuckDB's result of the case's SQL over all rows of both streams (minus ``without`` ids)."""
    con = duckdb.connect()
    for a in "oc":
        t = pa.concat_tables([b for x, b in case.batches if x == a])
        if without:
            t = t.filter(pa.array([i not in without[a] for i in t.column("id").to_pylist()]))
        con.register(a, t)
    for name, t in case.masters.items():
        con.register(name, t)
    rows = con.execute(case.sql).fetchall()
    con.close()
    return Counter(tuple(r) for r in rows)


def run_window(
    case: WindowCase, budget: int, restart_at: set[int], store_factory: Any = None, **options: Any
) -> tuple[list[pa.Table], MultiWayJoin]:
    """Feed the batches in order (then drain); checkpoint, drop and restore after the steps in ``restart_at``."""

    def make() -> dict[str, Any]:
        return {**options, **({"store": store_factory()} if store_factory is not None else {})}

    op = MultiWayJoin(case.spec, case.masters, budget, **make())
    out: list[pa.Table] = []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = DirectoryStore(tmp)
        for step, (alias, b) in enumerate(case.batches, start=1):
            out.append(op.process(b, alias))
            if step in restart_at:
                op.checkpoint(ckpt, step)
                op.store.close()
                op = MultiWayJoin.restore(ckpt, case.spec, case.masters, budget, **make())
        out.extend(op.drain())
    return out, op
