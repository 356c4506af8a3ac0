"""Memory budget mode, the cost model (Eq. 1-6) and its calibration, checkpoint-store hygiene."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from reference import as_multiset, batch_join

from ssbj.core import (
    ArrowMaster,
    CostConstants,
    CostModel,
    JoinSpec,
    SemiStreamJoin,
    StepCost,
    calibrate,
    plan_memory,
)
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.costmodel import (
    DISK_ROW_OVERHEAD,
    HS_TUPLE_OVERHEAD,
    NEW_CHUNK_INDEX_BYTES,
    QUEUE_RECORD,
    RESERVE_SHARE,
    STEP_TUPLE_BYTES,
)
from ssbj.core.rowsize import row_nbytes
from ssbj.errors import CheckpointError, ConfigError, InputError


def _zipf_data(n_master: int, n_stream: int, seed: int = 7) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    master = pa.table(
        {
            "mid": np.arange(n_master, dtype=np.int64),
            "mk": rng.integers(0, n_master, n_master),
            "attr": rng.integers(0, 100, n_master),
        }
    )
    p = 1.0 / np.arange(1, n_master + 1)
    p /= p.sum()
    keys = rng.permutation(n_master)[rng.choice(n_master, n_stream, p=p)]
    stream = pa.table({"sid": np.arange(n_stream, dtype=np.int64), "sk": keys})
    return stream, master


@pytest.mark.parametrize("algorithm", ["ssbj", "meshjoin"])
def test_memory_budget_holds_and_output_is_exact(algorithm: str) -> None:
    stream, master = _zipf_data(20_000, 120_000)
    v_s = float(row_nbytes(stream.slice(0, 1000)).mean())
    v_r = float(row_nbytes(master.select(["mid", "attr"]).slice(0, 1000)).mean())
    budget = 400_000
    plan = plan_memory(budget, master.num_rows, v_s, v_r, CostModel())
    spec = JoinSpec(
        "sk", "mk", ("mid", "attr"), algorithm=algorithm, memory_budget=budget, chunk_bytes=plan.chunk_bytes
    )
    op = SemiStreamJoin(spec, ArrowMaster(master, plan.partition_rows), stream.schema, master.schema)
    out: Counter[Any] = Counter()
    peaks = []
    for r in op.run(stream.to_batches(max_chunksize=5_000)):
        out += as_multiset(r.enriched)
        if r.metrics.r_cycle > 1:
            peaks.append(r.metrics.memory.total)
    assert out == batch_join(stream, master, "sk", "mk", ["mid", "attr"])
    assert peaks and max(peaks) <= budget * 1.01
    if algorithm == "ssbj":
        assert op.totals()["cache_share"] > 0.2


def test_plan_memory_respects_eq1_and_grows_with_budget() -> None:
    model = CostModel()
    rates = []
    for budget in [300_000, 1_000_000, 5_000_000, 50_000_000]:
        plan = plan_memory(budget, 1_000_000, 40.0, 30.0, model)
        k = plan.partitions
        # the disk buffer, H_S's ring of k chunks (at most k are live), Q, and the reserve
        fixed = plan.partition_rows * (30.0 + DISK_ROW_OVERHEAD) + (k + 2) * QUEUE_RECORD
        # per w_S: k chunks' tuples, one chunk of new values in H_S's index, the step's temporaries
        per_w_s = k * (40.0 + HS_TUPLE_OVERHEAD) + NEW_CHUNK_INDEX_BYTES + STEP_TUPLE_BYTES
        assert fixed + plan.w_s * per_w_s <= budget * (1 - RESERVE_SHARE)
        # and w_S is the largest that fits k chunks (not k + 1)
        assert fixed + (plan.w_s + 1) * per_w_s > budget * (1 - RESERVE_SHARE)
        assert plan.partitions * plan.partition_rows >= 1_000_000
        rates.append(plan.predicted_service_rate)
    assert rates == sorted(rates)
    with pytest.raises(ConfigError):
        plan_memory(10, 1_000_000, 40.0, 30.0, model)


def test_cost_model_eq2_eq3() -> None:
    k = CostConstants(c_fixed=1000, c_io_row=1, c_h=2, c_b=3, c_s=4, c_a=5, c_e=6, c_o=7)
    m = CostModel(k)
    s = StepCost(b=10, w_n=20, w_s=30, n_out=40)
    ns = 1000 + 10 * (1 + 2 + 3) + 20 * (4 + 2) + 30 * (6 + 4 + 5) + 40 * 7
    assert m.c_loop(s) == pytest.approx(ns * 1e-9)
    assert m.service_rate(s) == pytest.approx(50 / (ns * 1e-9))
    # a larger H_S makes each master row's probe dearer (c_hs: ns per row per million tuples)
    big = CostModel(replace(k, c_hs=200.0))
    assert big.c_loop(s) == m.c_loop(s)  # H_S's size not given
    s_hs = replace(s, hs=500_000)
    assert big.c_loop(s_hs) == pytest.approx((ns + 10 * 100.0) * 1e-9)


def test_calibration_without_hs_sizes_leaves_c_hs_at_zero() -> None:
    truth = CostModel(CostConstants(c_fixed=50_000, c_h=30, c_s=10, c_o=100))
    rng = np.random.default_rng(2)
    samples = []
    for _ in range(20):
        s = StepCost(b=int(rng.integers(100, 100_000)), w_n=0, w_s=int(rng.integers(0, 5_000)), n_out=0)
        samples.append((s, truth.c_loop(s)))
    assert calibrate(samples).c_hs == 0.0


def test_calibration_recovers_the_model_it_was_fed() -> None:
    truth = CostModel(
        CostConstants(c_fixed=50_000, c_io_row=20, c_h=30, c_b=4, c_s=10, c_a=50, c_e=20, c_o=100, c_hs=250)
    )
    rng = np.random.default_rng(1)
    samples = []
    for _ in range(40):
        s = StepCost(
            b=int(rng.integers(100, 100_000)),
            w_n=int(rng.integers(0, 50_000)),
            w_s=int(rng.integers(0, 50_000)),
            n_out=int(rng.integers(0, 100_000)),
            hs=int(rng.integers(0, 1_000_000)),
        )
        samples.append((s, truth.c_loop(s)))
    fitted = CostModel(calibrate(samples))
    for s, t in samples:
        assert fitted.c_loop(s) == pytest.approx(t, rel=1e-6)
    with pytest.raises(InputError, match="got 3"):
        calibrate(samples[:3])


def test_calibration_file_round_trip(tmp_path: Any) -> None:
    k = CostConstants(c_fixed=1.5, c_o=9.0)
    k.save(tmp_path / "c.json")
    assert CostConstants.load(tmp_path / "c.json") == k
    with pytest.raises(ConfigError):
        CostConstants.load(tmp_path / "missing.json")


def test_step_metrics_report_prediction_and_components() -> None:
    stream, master = _zipf_data(2_000, 20_000)
    spec = JoinSpec("sk", "mk", ("mid",), chunk_bytes=4_000, switching="paper")
    op = SemiStreamJoin(spec, ArrowMaster(master, 500), stream.schema, master.schema)
    ms = [r.metrics for r in op.run(stream.to_batches(max_chunksize=2_000))]
    assert all(m.c_loop_predicted > 0 and m.c_loop_measured > 0 for m in ms)
    assert {m.fsm_state for m in ms} >= {"incrementing", "switching", "phase-out"}
    op = SemiStreamJoin(replace(spec, switching="pipelined"), ArrowMaster(master, 500), stream.schema, master.schema)
    states = {r.metrics.fsm_state for r in op.run(stream.to_batches(max_chunksize=2_000))}
    assert states == {"warm-up", "per-value"} or states == {"per-value"}
    last = ms[-1].to_dict()
    assert set(last["memory"]) >= {"h_s", "h_r", "queue", "disk_buffer", "switching_buffer", "total"}
    assert sum(m.w for m in ms) == stream.num_rows


def test_checkpoint_store_retains_and_rolls_back(tmp_path: Any) -> None:
    stream, master = _zipf_data(500, 5_000)
    spec = JoinSpec("sk", "mk", ("mid",), chunk_bytes=400)
    store = DirectoryStore(tmp_path, retain=2)
    op = SemiStreamJoin(spec, ArrowMaster(master, 100), stream.schema, master.schema)
    for b in stream.to_batches(max_chunksize=500):
        op.push(b)
    for i in range(12):
        op.step()
        op.checkpoint(store, i)
    assert store.manifests() == [10, 11]
    referenced: set[str] = set()
    for i in (10, 11):
        referenced.update(store.read_manifest(i)[1]["files"])
    on_disk = {p.name for p in tmp_path.iterdir()} - {"LATEST", "manifest-10.json", "manifest-11.json"}
    assert on_disk == referenced  # nothing unreferenced is left behind
    # a torn write (temporary file) does not disturb restoring the last complete checkpoint
    (tmp_path / ".manifest-12.json.tmp").write_text("{")
    restored = SemiStreamJoin.restore(store, spec, ArrowMaster(master, 100), stream.schema, master.schema, 10)
    restored.step()
    restored.checkpoint(store, 11)  # rolled back: the old checkpoint 11 is replaced
    assert store.manifests() == [10, 11]
    with pytest.raises(CheckpointError):
        SemiStreamJoin.restore(
            store, JoinSpec("sk", "mk", ("attr",)), ArrowMaster(master, 100), stream.schema, master.schema
        )
    with pytest.raises(CheckpointError):
        DirectoryStore(tmp_path / "empty").read_manifest()
