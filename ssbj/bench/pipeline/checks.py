# ruff: noqa: S608 - SQL text is built from the benchmark's own table names and %s placeholders only
"""After a method ran: its warehouse table against the batch join, and the staleness of the updated rows."""

from __future__ import annotations

import math
from typing import Any

from ssbj.bench.pipeline.data import Data
from ssbj.bench.pipeline.measure import Staleness
from ssbj.bench.pipeline.spec import NEW_SEGMENT, Case, Json


def check(db: Any, case: Case, data: Data, all_tuples: int, table: str, tuples: int, dead_table: str | None) -> Json:
    """Compare the warehouse table with the inner join computed from the generated data.

    Exact as a multiset: the row count and the sums equal the batch join's, no (order, master
    row) pair occurs twice, and every row's master values (and, in case b, its join key) equal
    the master row it names; c_segment of the updated customers is excepted (staleness).
    """
    exp = data.expected
    hot = data.hot_keys
    rid = case.row_id
    conn = db.root(db.name)
    with conn.cursor() as cur:
        # case a: one row per order at most; case b: one row per (order, customer) pair
        pair = "order_id" if case.name == "a" else f"order_id, `{rid}`"
        cur.execute(f"SELECT COUNT(*), COUNT(DISTINCT {pair}), SUM(order_id), SUM(c_balance) FROM `{table}`")
        n, distinct, s_oid, s_bal = cur.fetchone()
        marks = ",".join(["%s"] * len(hot))
        same_key = f" OR NOT (w.`{case.stream_key}` <=> c.`{case.master_key}`)" if case.name == "b" else ""
        cur.execute(
            f"SELECT COUNT(*) FROM `{table}` w LEFT JOIN customer c ON c.c_custkey = w.`{rid}` "
            "WHERE c.c_custkey IS NULL OR NOT (w.c_name <=> c.c_name) OR NOT (w.c_balance <=> c.c_balance) "
            f"OR (NOT (w.c_segment <=> c.c_segment) AND w.`{rid}` NOT IN ({marks})){same_key}",
            hot,
        )
        bad_values = int(cur.fetchone()[0])
        dead = None
        if dead_table is not None:
            cur.execute(f"SELECT COUNT(*) FROM `{dead_table}`")
            dead = int(cur.fetchone()[0])
    conn.close()
    n = int(n or 0)
    ok_count = n == exp["rows"]
    ok_sums = int(s_oid or 0) == exp["sum_order_id"] and math.isclose(
        float(s_bal or 0.0), exp["sum_balance"], rel_tol=1e-9, abs_tol=1e-6
    )
    return {
        "warehouse_rows": n,
        "expected_rows": exp["rows"],
        "row_count_ok": ok_count,
        "distinct_order_ids": int(distinct or 0),  # distinct (order_id, master row) pairs
        "duplicates": n - int(distinct or 0),
        "sum_order_id_ok": int(s_oid or 0) == exp["sum_order_id"],
        "sum_balance_ok": ok_sums,
        "rows_with_wrong_master_values": bad_values,
        "dead_letters": dead,
        "stream_tuples_seen": tuples,
        "all_tuples_seen": tuples == all_tuples,
        "ok": ok_count and ok_sums and bad_values == 0 and n == int(distinct or 0) and tuples == all_tuples,
    }


def stale_report(db: Any, case: Case, all_tuples: int, table: str, st: Staleness, exact: Json | None = None) -> Json:
    """How long enriched rows of the updated customers kept the old c_segment after the update.

    ``exact`` is the window measured where the join runs (``tuples`` read since the update up to
    the last stale row, ``seconds``, ``how``); without it the window is bounded by the end of the
    micro-batch that wrote the last stale row.
    """
    if st.update_time is None or st.update_after_batch is None or st.update_position is None:
        return {"measured": False, "reason": "the run ended before the update point"}
    hot = st.hot
    rid = case.row_id
    marks = ",".join(["%s"] * len(hot))
    after_b = st.update_after_batch
    conn = db.root(db.name)
    with conn.cursor() as cur:
        base = f"FROM `{table}` WHERE `{rid}` IN ({marks}) AND ssbj_batch_id > %s"
        cur.execute(f"SELECT COUNT(*), SUM(c_segment = %s) {base}", (NEW_SEGMENT, *hot, after_b))
        total_after, fresh_after = cur.fetchone()
        cur.execute(
            f"SELECT COUNT(*), SUM(order_id >= %s) {base} AND c_segment <> %s",
            (st.update_position, *hot, after_b, NEW_SEGMENT),
        )
        stale, stale_arrived_after = cur.fetchone()
        cur.execute(
            f"SELECT ssbj_batch_id, ssbj_segment {base} AND c_segment <> %s "
            "ORDER BY ssbj_batch_id DESC, ssbj_segment DESC LIMIT 1",
            (*hot, after_b, NEW_SEGMENT),
        )
        last = cur.fetchone()
        cur.execute(
            f"SELECT COUNT(*) FROM `{table}` WHERE `{rid}` IN ({marks}) AND ssbj_batch_id <= %s AND c_segment = %s",
            (*hot, after_b, NEW_SEGMENT),
        )
        future = int(cur.fetchone()[0])
    conn.close()
    stale = int(stale or 0)
    last_batch = max(st.batch_done) if st.batch_done else None
    out: Json = {
        "measured": True,
        "hot_keys": len(hot),
        "update_after_batch": after_b,
        "update_position_tuples": st.update_position,
        "hot_rows_after_update": int(total_after or 0),
        "fresh_rows_after_update": int(fresh_after or 0),
        "stale_rows_after_update": stale,
        # orders < update_position were all read before the update (equal shares per partition)
        "stale_rows_that_arrived_after_update": int(stale_arrived_after or 0),
        "stale_share_after_update": stale / int(total_after) if total_after else None,
        "rows_with_new_value_before_update": future,
    }
    if stale:
        key = (int(last[0]), int(last[1]))
        done = st.batch_done.get(key)
        out["last_stale_written_by"] = {"batch_id": key[0], "segment": key[1]}
        out["stale_until_end_of_run"] = last_batch is not None and key >= last_batch
        if exact is not None:
            out["stale_window_tuples"] = int(exact["tuples"])
            out["stale_window_seconds"] = float(exact["seconds"])
            out["window_measured_by"] = exact["how"]
        else:
            out["stale_window_tuples"] = None
            out["stale_window_seconds"] = None if done is None else done - st.update_time
            out["window_measured_by"] = "end of the micro-batch that wrote the last stale row (upper bound)"
    else:
        out["stale_window_tuples"] = 0
        out["stale_window_seconds"] = 0.0
        out["stale_until_end_of_run"] = False
    out["seconds_from_update_to_end_of_run"] = (
        st.batch_done[last_batch] - st.update_time if last_batch is not None else None
    )
    out["tuples_from_update_to_end_of_run"] = all_tuples - st.update_position
    return out
