"""The continuous-query exactness run: its change stream, its DuckDB reference, one small run end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cq_reference import tpch_data

from ssbj.bench.exp_cq import RELS, DuckState, Stream
from ssbj.bench.exp_cq_exact import _apply_net, exp_cq_exact, paper_stream
from ssbj.bench.harness import PRESETS, Bench
from ssbj.cq.maintainer import ContinuousQuery


@pytest.fixture(scope="module")
def sf001(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pa.Table]:
    return tpch_data(0.01, tmp_path_factory.mktemp("tpch") / "sf0.01")


def test_paper_stream_inserts_before_deletes_and_keeps_the_first_half(sf001: dict[str, pa.Table]) -> None:
    stream, final = paper_stream(sf001, moves=50, rng=np.random.default_rng(3))
    first = sum(len(v) for v in final["first"].values())
    second = sum(sf001[r].num_rows for r in RELS) - first
    assert len(stream.rel) == first + 2 * second + 2 * 50
    assert len(final["first"]["nation"]) == 25  # nation stays whole
    seen: dict[tuple[int, int], int] = {}
    for rel, row, ins in zip(stream.rel.tolist(), stream.row.tolist(), stream.ins.tolist(), strict=True):
        key = (rel, row)
        if ins:
            assert seen.get(key, 0) == 0, f"second insert of {key}"
            seen[key] = 1
        else:
            assert seen.get(key) == 1, f"delete of {key} before its insert"
            seen[key] = 0
    live = {k for k, v in seen.items() if v}
    c = RELS.index("customer")
    moved_to = {(c, int(r)) for r in final["moved_to"]}
    want = {(RELS.index(r), int(i)) for r, rows in final["first"].items() for i in rows}
    want = (want - {(c, int(r)) for r in final["moved_from"]}) | moved_to
    assert live == want


def test_net_apply_drops_a_tuple_inserted_and_deleted_in_one_batch(sf001: dict[str, pa.Table]) -> None:
    stream = Stream(dict(sf001))
    n = RELS.index("nation")
    stream.extend(np.array([n, n, n]), np.array([0, 0, 1]), np.array([True, False, True]))
    db = DuckState(stream, 0)
    frames = stream.frames(0, 3)
    _apply_net(db, frames["nation"], "nation")
    assert db.con.execute("select n_nationkey from nation").fetchall() == [(1,)]
    db2 = DuckState(stream, 0)
    db2.apply(frames, "nation")  # deletes before inserts: the reason for the net apply
    assert len(db2.con.execute("select * from nation").fetchall()) == 2


def test_small_run_is_exact_and_compares_every_batch(sf001: dict[str, pa.Table], tmp_path: Path) -> None:
    res = exp_cq_exact(_bench(sf001, tmp_path))
    (run,) = res["runs"]
    assert res["all_exact"] is True
    assert run["batches_compared"] == -(-run["changes"] // run["batch"])
    assert run["most_groups"] > 0 and run["final_groups"] > 0  # the comparisons are not of empty answers


def _bench(data: dict[str, pa.Table], tmp_path: Path) -> Bench:
    out = tmp_path / "tpch-q7-sf0.01"
    out.mkdir()
    for name in RELS:  # the fixture's data, so that tpchgen runs once
        pq.write_table(data[name], out / f"{name}.parquet")
    return Bench(PRESETS["small"], tmp_path, seed=0)


def test_a_wrong_answer_is_reported(
    sf001: dict[str, pa.Table], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    right = ContinuousQuery.result
    monkeypatch.setattr(ContinuousQuery, "result", lambda self: right(self).slice(1))  # one group lost
    res = exp_cq_exact(_bench(sf001, tmp_path))
    assert res["all_exact"] is False
    assert res["runs"][0]["mismatched_batches"] > 0
