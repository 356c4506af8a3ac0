"""The complete cache (Theorem 3 (c), ``ssbj.core.complete``): with a budget that holds all of R.

* reached within two R-cycles (one to measure R, one take-all R-cycle); H_S then stays
  empty and the output is exact (duplicates, NULL keys, unmatched keys, many-to-many);
* exact across checkpoints and restores at any step (hypothesis), mid take-all or while
  complete included, step for step the uninterrupted run;
* inserts (new values), deletes (of every row of a value too), updates and key changes of
  R reach the output within one R-cycle;
* when R outgrows the budget the mode is left: the cache stays, misses go to H_S again,
  and nothing is lost or wrong;
* the budget: the take-all's s_B and switch-in are reserved and reported, the peak stays
  <= 1.05x; a budget without room for the switch-in never starts it.
"""

from __future__ import annotations

import importlib.util
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from core_scenarios import key_tables
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from range_master import RangeMaster
from reference import as_multiset, batch_join, unmatched_reference
from sliced_calls import count_sliced_calls

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin, lanes
from ssbj.core import budget as B
from ssbj.core import complete as CC
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.switching import holds_all_of_r


def _budget_module() -> Any:
    """tests/core/test_budget_enforced.py (its independent walk of the operator's live arrays)."""
    path = Path(__file__).with_name("test_budget_enforced.py")
    spec = importlib.util.spec_from_file_location("_complete_budget_walk", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


live_bytes = _budget_module().live_bytes


def _master(rng: random.Random, n: int = 120, domain: int = 40, spacing: int = 1) -> dict[int, tuple[int | None, str]]:
    """Keys with duplicates (many-to-many) and a few NULLs; some values of the domain have no row."""
    return {pk * spacing: (None if rng.random() < 0.05 else rng.randrange(domain), f"v0-{pk}") for pk in range(n)}


def _stream(rng: random.Random, first_id: int, n: int, domain: int = 60) -> pa.Table:
    """Zipf-like keys over [0, domain) (values >= 40 have no master row at first), and NULLs."""
    keys: list[int | None] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.03:
            keys.append(None)
        elif r < 0.25:  # the values the tests insert into R, or move rows to
            keys.append(rng.randrange(40, 52))
        else:
            keys.append(min(int(rng.paretovariate(0.7)) - 1, domain - 1))
    return pa.table({"id": pa.array(range(first_id, first_id + n), pa.int64()), "k": pa.array(keys, pa.int64())})


def _spec(budget: int | None = 1 << 22, **kw: Any) -> JoinSpec:
    return JoinSpec(
        stream_key="k", master_key="key", master_columns=("pk", "v"), chunk_bytes=2_000, memory_budget=budget, **kw
    )


def _check_totals(op: SemiStreamJoin) -> None:
    t = op.totals()
    assert t["tuples_in"] == t["matched_source_rows"] + t["unmatched_source_rows"] + t["waiting"]


@pytest.mark.parametrize("pieces", [False, True])
@pytest.mark.parametrize("strings", [False, True])
@pytest.mark.parametrize("threads", [1, 3])
def test_complete_within_two_r_cycles_then_hs_stays_empty_and_exact(
    pieces: bool, strings: bool, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    sliced = count_sliced_calls(monkeypatch, 8)  # this stream's steps are split (80-tuple batches)
    rng = random.Random(3)
    rows = _master(rng)
    master = RangeMaster(rows, b=20, k=6, pieces=pieces)
    mt = master.table()
    batches = [_stream(rng, i * 80, 80) for i in range(60)]
    if strings:  # hashed keys: every pair is verified
        conv = pc.cast(mt.column("key"), pa.string())
        mt = mt.set_column(1, "key", conv)
        batches = [b.set_column(1, "k", pc.cast(b.column("k"), pa.string())) for b in batches]
        master = ArrowMaster(mt, 20)  # type: ignore[assignment]
    spec = _spec(disk_chunk_rows=7 if pieces else None, threads=threads)
    op = SemiStreamJoin(spec, master, batches[0].schema, mt.schema)
    out: Counter[Any] = Counter()
    um: Counter[Any] = Counter()
    complete_at = None
    for b in batches:
        op.push(b)
        r = op.step()
        out += as_multiset(r.enriched)
        um += as_multiset(r.unmatched)
        _check_totals(op)
        m = r.metrics
        if op.complete and complete_at is None:
            complete_at = m.r_cycle
            assert m.fsm_state == "complete"
        if complete_at is not None:
            assert op.complete and m.hs_tuples == 0 and m.w_s == 0 and op.hs_tuples == 0
            assert m.w_n + m.null_keys == m.w
    for r in op.drain():
        out += as_multiset(r.enriched)
        um += as_multiset(r.unmatched)
    assert complete_at is not None and complete_at <= 3  # R-cycle 1 measures R, 2 takes all of it
    assert (sliced.count > 0) == (threads > 1)  # the complete cache's calls ran in slices
    assert op._c.extra.get("take_all_cycles") == 1 and op._c.extra.get("complete_missed", 0) > 0
    stream = pa.concat_tables(batches)
    assert out == batch_join(stream, mt, "k", "key", ["pk", "v"])
    assert um == unmatched_reference(stream, mt, "k", "key")
    assert op.cache.rows == sum(1 for k, _ in rows.values() if k is not None)  # all of R
    _check_totals(op)


def test_off_by_spec_keeps_the_fsm() -> None:
    rng = random.Random(3)
    master = RangeMaster(_master(rng), b=20, k=6)
    op = SemiStreamJoin(_spec(complete_cache=False), master, _stream(rng, 0, 1).schema, master.table().schema)
    for i in range(40):
        op.push(_stream(rng, i * 80, 80))
        r = op.step()
        assert r.metrics.fsm_state not in ("take-all", "complete")
    assert holds_all_of_r(op) and not op.complete and op.hs_tuples > 0


# ---------------------------------------------------------------- checkpoints (hypothesis)
KEY = st.one_of(st.none(), st.integers(0, 14))


@st.composite
def scenario(draw: Any) -> dict[str, Any]:
    return {
        "master_keys": draw(st.lists(KEY, max_size=30)),
        "stream_keys": draw(st.lists(st.one_of(st.integers(0, 3), KEY), min_size=80, max_size=300)),
        "b": draw(st.integers(2, 12)),
        "batch": draw(st.integers(1, 6)),
        "chunk_bytes": draw(st.integers(1, 300)),
        # mostly enough for all of R and its switch-in; sometimes not
        "memory_budget": draw(st.sampled_from([3_000, 50_000, 1 << 21])),
        "strings": draw(st.booleans()),
        "pieces": draw(st.sampled_from([None, 1, 3])),
        "r_filter": draw(st.sampled_from(["auto", "off"])),
        "cuts": draw(st.sets(st.integers(0, 100), min_size=1, max_size=6)),
        "threads": draw(st.sampled_from([1, 2])),
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario())
def test_exact_across_restores_at_random_steps(sc: dict[str, Any], tmp_path_factory: Any) -> None:
    """One batch pushed per step (so the run lasts R-cycles), restores at random steps."""
    stream, master = key_tables(sc)
    spec = JoinSpec(
        "sk",
        "mk",
        ("mval", "mk"),
        chunk_bytes=sc["chunk_bytes"],
        memory_budget=sc["memory_budget"],
        disk_chunk_rows=sc["pieces"],
        r_filter=sc["r_filter"],
        eviction_interval=2,
        threads=sc["threads"],
    )
    batches = stream.to_batches(max_chunksize=sc["batch"])

    def fresh() -> SemiStreamJoin:
        return SemiStreamJoin(spec, ArrowMaster(master, sc["b"]), stream.schema, master.schema)

    def run(cuts: set[int], store: DirectoryStore | None) -> list[tuple[Counter[Any], Counter[Any]]]:
        op = fresh()
        steps = []
        i = 0
        while i < len(batches) or op.waiting_tuples:
            if i in cuts and store is not None:
                state = "while complete" if op.complete else "mid take-all" if op._take_all else "otherwise"
                event(f"restored {state}")
                op.checkpoint(store, i)
                op = SemiStreamJoin.restore(store, spec, ArrowMaster(master, sc["b"]), stream.schema, master.schema)
            if i < len(batches):
                op.push(batches[i])
            r = op.step()
            steps.append((as_multiset(r.enriched), as_multiset(r.unmatched)))
            i += 1
        event(f"complete at the end: {op.complete}")
        _check_totals(op)
        return steps

    with mock.patch.object(lanes, "MIN_SLICE", 1):  # a step's few tuples are sliced too
        reference = run(set(), None)
        restored = run(sc["cuts"], DirectoryStore(tmp_path_factory.mktemp("ckpt")))
    assert sum((e for e, _ in reference), Counter()) == batch_join(stream, master, "sk", "mk", ["mval", "mk"])
    assert sum((u for _, u in reference), Counter()) == unmatched_reference(stream, master, "sk", "mk")
    assert restored == reference


def _until(op: SemiStreamJoin, rng: random.Random, done: Any, next_id: int) -> int:
    for _ in range(200):
        if done(op):
            return next_id
        op.push(_stream(rng, next_id, 50))
        next_id += 50
        op.step()
    raise AssertionError("state never reached")


@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("when", ["take-all", "complete"])
def test_restore_mid_take_all_or_while_complete_continues_exactly(when: str, fixed: bool, tmp_path: Any) -> None:
    """A restore in the middle of the take-all R-cycle (s_B half full) or while complete.

    ``fixed``: a fixed-width layout, s_B written in place (``ssbj.core.takeall``).
    """
    rng = random.Random(11)
    master = RangeMaster(_master(rng), b=20, k=6, fixed=fixed)
    mt = master.table()
    spec = _spec()
    schema = _stream(rng, 0, 1).schema

    def at_state(op: SemiStreamJoin) -> bool:
        if when == "take-all":
            held = (op._store.n if op._store is not None else 0) if fixed else len(op._sb)
            return op._take_all and held > 0 and op._p == 3
        return op.complete and op._p == 2

    op = SemiStreamJoin(spec, master, schema, mt.schema)
    start = _until(op, random.Random(5), at_state, 0)
    tail = [_stream(rng, start + i * 50, 50) for i in range(30)]
    op.checkpoint(DirectoryStore(tmp_path), 1)
    restored = SemiStreamJoin.restore(DirectoryStore(tmp_path), spec, master, schema, mt.schema)
    assert restored._take_all == op._take_all and restored.complete == op.complete
    assert (restored._store is not None) == (fixed and when == "take-all")
    for b in tail:
        for o in (op, restored):
            o.push(b)
        a, r = op.step(), restored.step()
        assert as_multiset(a.enriched) == as_multiset(r.enriched)
        assert as_multiset(a.unmatched) == as_multiset(r.unmatched)
        assert a.metrics.fsm_state == r.metrics.fsm_state
    assert restored.complete
    a_t, r_t = op.totals(), restored.totals()
    for name in ("tuples_in", "matched_source_rows", "unmatched_source_rows", "output_rows", "served_by_cache"):
        assert a_t[name] == r_t[name]


# ---------------------------------------------------------------- freshness
def _late_output(
    outputs: list[tuple[int, pa.Table, pa.Table]], late_ids: set[int]
) -> tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    out: Counter[tuple[Any, ...]] = Counter()
    um: Counter[tuple[Any, ...]] = Counter()
    for _, enriched, unmatched in outputs:
        for row, cnt in as_multiset(enriched).items():
            if row[0] in late_ids:
                out[row] += cnt
        for row, cnt in as_multiset(unmatched).items():
            if row[0] in late_ids:
                um[row] += cnt
    return out, um


@pytest.mark.parametrize(("pieces", "resident"), [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("checkpoint_each_step", [False, True])
def test_master_changes_reach_the_complete_cache_within_one_r_cycle(
    tmp_path: Any, checkpoint_each_step: bool, pieces: bool, resident: bool
) -> None:
    """``resident``: a partition read again into the same buffers is known unchanged, without comparing rows."""
    rng = random.Random(7)
    master = RangeMaster(_master(rng), b=20, k=6, pieces=pieces, resident=resident)
    spec = _spec(disk_chunk_rows=5 if pieces else None)
    schema = _stream(rng, 0, 1).schema
    mschema = master.table().schema
    op = SemiStreamJoin(spec, master, schema, mschema)
    store = DirectoryStore(tmp_path)
    k = master.num_partitions()
    next_id = 0
    outputs: list[tuple[int, pa.Table, pa.Table]] = []
    pushed_at: dict[int, int] = {}
    batches: list[pa.Table] = []
    changes: list[int] = []  # steps at which R changed (before the step)
    for step in range(16 * k):
        if op.complete and len(changes) < 2 and (not changes or step >= changes[-1] + 2 * k):
            # update every row, delete one row, every row of one value and insert new values
            for pk, (key, _) in list(master.rows.items()):
                master.rows[pk] = (key, f"v{len(changes) + 1}-{pk}")
            gone = next(key for key, _ in master.rows.values() if key is not None)
            for pk in [pk for pk, (key, _) in master.rows.items() if key == gone]:
                del master.rows[pk]
            del master.rows[min(master.rows)]
            base = 1000 * (len(changes) + 1)
            master.rows[base] = (45 + len(changes), f"new-{base}")  # a value new to R, in the last partition
            master.rows[base + 1] = (45 + len(changes), f"new-{base + 1}")
            master.rows[7] = (50 + len(changes), f"moved-{7}")  # a key change: row 7 leaves its value for a new one
            changes.append(step)
        batch = _stream(rng, next_id, 60)
        batches.append(batch)
        for i in range(next_id, next_id + 60):
            pushed_at[i] = step
        next_id += 60
        op.push(batch)
        res = op.step()
        outputs.append((step, res.enriched, res.unmatched))
        if checkpoint_each_step:
            op.checkpoint(store, step)
            op = SemiStreamJoin.restore(store, spec, master, schema, mschema)
    assert len(changes) == 2 and op.complete
    assert op._c.extra.get("complete_values_added", 0) >= 2
    assert bool(op._complete_seen) == (resident and not pieces and not checkpoint_each_step)  # (not checkpointed)
    for r in op.drain():
        outputs.append((-1, r.enriched, r.unmatched))
    # every tuple that arrived one R-cycle (k steps) after the last change sees only the new R
    late_ids = {i for i, s in pushed_at.items() if s >= changes[-1] + k}
    out, um = _late_output(outputs, late_ids)
    ids = pa.array(sorted(late_ids), pa.int64())
    late = pa.concat_tables([t.filter(pc.is_in(t.column("id"), ids)) for t in batches])
    mt = master.table()
    assert out == batch_join(late, mt, "k", "key", ["pk", "v"])
    assert um == unmatched_reference(late, mt, "k", "key")
    assert any(r[2] == 2001 for r in out)  # the new value's rows are served
    assert any(r[2] == 7 and r[1] == 51 for r in out)  # the changed key
    # and between the two changes: one R-cycle after the first, the first version of R
    mid_ids = {i for i, s in pushed_at.items() if changes[0] + k <= s < changes[1]}
    assert mid_ids
    out1, _ = _late_output(outputs, mid_ids)
    assert all(str(r[3]).startswith(("v1-", "new-", "moved-")) for r in out1)
    assert not any(r[1] == 46 for r in out1)  # inserted by the second change only
    _check_totals(op)


# ---------------------------------------------------------------- R outgrows the budget
@dataclass
class _Grown:
    """What a run in which R grows 30-fold once the mode is complete recorded."""

    op: SemiStreamJoin
    peaks: list[float]
    grown_at: int | None
    left_at: int | None
    hs_after_leaving: int


def _grow_while_complete(
    value_of: Callable[[random.Random], int], peak_of: Callable[[SemiStreamJoin, Any], float]
) -> _Grown:
    """Run 180 steps of 60 tuples; once complete, R grows 30-fold in every partition (values from ``value_of``).

    Checks the tuples pushed from one R-cycle after the growth on against the batch join
    (exact) and the totals; returns the run's record for the caller's own checks.
    """
    rng = random.Random(5)
    master = RangeMaster(_master(rng, n=120, spacing=50), b=1000, k=6)
    schema = _stream(rng, 0, 1).schema
    budget = 160_000
    op = SemiStreamJoin(_spec(budget), master, schema, master.table().schema)
    next_id = 0
    outputs: list[tuple[int, pa.Table, pa.Table]] = []
    pushed_at: dict[int, int] = {}
    batches: list[pa.Table] = []
    run = _Grown(op, [], None, None, 0)
    for step in range(30 * 6):
        if op.complete and run.grown_at is None:
            for pk in range(6_000):
                if pk not in master.rows:
                    master.rows[pk] = (value_of(rng), f"g-{pk}")
            run.grown_at = step
        batch = _stream(rng, next_id, 60)
        batches.append(batch)
        for i in range(next_id, next_id + 60):
            pushed_at[i] = step
        next_id += 60
        op.push(batch)
        res = op.step()
        outputs.append((step, res.enriched, res.unmatched))
        if res.metrics.step > 0:
            run.peaks.append(peak_of(op, res) / budget)
        if run.grown_at is not None and run.left_at is None and not op.complete:
            run.left_at = step
        if run.left_at is not None:
            run.hs_after_leaving = max(run.hs_after_leaving, op.hs_tuples)
    assert run.grown_at is not None
    for r in op.drain():
        outputs.append((-1, r.enriched, r.unmatched))
    late_ids = {i for i, s in pushed_at.items() if s >= run.grown_at + 6}
    out, um = _late_output(outputs, late_ids)
    ids = pa.array(sorted(late_ids), pa.int64())
    late = pa.concat_tables([t.filter(pc.is_in(t.column("id"), ids)) for t in batches])
    mt = master.table()
    assert out == batch_join(late, mt, "k", "key", ["pk", "v"])
    assert um == unmatched_reference(late, mt, "k", "key")
    _check_totals(op)
    return run


def test_leaves_complete_mode_when_r_outgrows_the_budget() -> None:
    # R grows with values new to it
    run = _grow_while_complete(lambda rng: rng.randrange(40, 160), lambda op, res: res.metrics.memory.total)
    assert run.left_at is not None and not run.op.complete
    assert run.op._c.extra.get("complete_left", 0) >= 1 and run.hs_after_leaving > 0  # misses went to H_S again
    assert max(run.peaks) <= 1.05, f"peak {max(run.peaks):.3f}x the budget"


# ---------------------------------------------------------------- the budget
def _zipf(n_master: int, n_stream: int, seed: int = 3) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    master = pa.table(
        {
            "mid": np.arange(n_master, dtype=np.int64),
            "mk": rng.integers(0, n_master, n_master),
            "attr": rng.integers(0, 100, n_master),
        }
    )
    p = 1.0 / np.arange(1, int(1.2 * n_master) + 1)
    p /= p.sum()
    keys = rng.choice(len(p), n_stream, p=p)  # a sixth of the stream's values have no master row
    return pa.table({"sid": np.arange(n_stream, dtype=np.int64), "sk": keys}), master


# 480k: the switch-in fits with the cache phase's call arrays (12 kB) and an eviction's
# rebuild temporaries (17 kB at 450k, kept) reserved; 450k no longer did after both were counted
@pytest.mark.parametrize("budget", [400_000, 480_000, 1_500_000, 4_000_000])
def test_budget_peak_with_the_take_all_and_its_switch_in(budget: int) -> None:
    """The take-all R-cycle's s_B and the switch-in (old H_R, s_B and the rebuild at once) stay within 1.05x.

    What is accounted is what is held (the live arrays), through the take-all and while complete.
    """
    stream, master = _zipf(5_000, 120_000)
    spec = JoinSpec("sk", "mk", ("mid", "attr"), memory_budget=budget, chunk_bytes=20_000)
    op = SemiStreamJoin(spec, ArrowMaster(master, 1_000), stream.schema, master.schema)
    out: Counter[Any] = Counter()
    peaks: list[float] = []
    switch = 0
    reserved = False
    for r in op.run(stream.to_batches(max_chunksize=4_000)):
        out += as_multiset(r.enriched)
        if r.metrics.step > 0:
            peaks.append(r.metrics.memory.total / budget)
        mem = r.metrics.memory
        held = mem.h_s + mem.h_r + mem.queue + mem.switching_buffer + mem.key_table + mem.prefetch + mem.r_filter
        assert live_bytes(op) == pytest.approx(held, rel=0.01, abs=256), (r.metrics.step, mem.to_dict())
        if op._take_all:
            reserved |= B.fixed_bytes(op) >= op.cache.nbytes() + op._take_all_reserve
            assert op._sb_bytes <= op._take_all_reserve  # s_B stays within what was reserved
        if op._switch_peak:
            switch = op._switch_peak
            assert r.metrics.memory.total >= op._switch_peak  # the step reports the switch-in's peak
    assert out == batch_join(stream, master, "sk", "mk", ["mid", "attr"])
    assert max(peaks) <= 1.05, f"peak {max(peaks):.3f}x the budget"
    if budget == 400_000:  # R's rows fit (holds_all_of_r), but not the switch-in: the FSM as before
        assert holds_all_of_r(op) and not CC.take_all_fits(op)
        assert not op.complete and op._c.extra.get("take_all_cycles", 0) == 0
    else:
        assert op.complete and reserved and switch > 0
        assert op._c.extra.get("take_all_void", 0) == 0


# ---------------------------------------------------------------- s_B written in place (ssbj.core.takeall)
def _fits_both(op: SemiStreamJoin) -> tuple[bool, bool]:
    """Whether a take-all fits now with s_B written in place, and with s_B as tables and the rebuild."""
    failed = op._store_failed
    op._store_failed = False
    in_place = CC.take_all_fits(op)
    op._store_failed = True
    tables = CC.take_all_fits(op)
    op._store_failed = failed
    return in_place, tables


def _wide(n_master: int, n_stream: int, width: int, domain: int, seed: int) -> tuple[pa.Table, pa.Table]:
    """R with a fixed-width payload (the hash-join benchmark's layout) and duplicate keys; a Zipf stream."""
    rng = np.random.default_rng(seed)
    payload = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), n_master, [None, pa.py_buffer(rng.integers(0, 256, n_master * width, dtype=np.uint8))]
    )
    master = pa.table(
        {"mid": np.arange(n_master, dtype=np.int64), "mk": rng.integers(0, domain, n_master), "pay": payload}
    )
    p = 1.0 / np.arange(1, int(1.3 * domain) + 1)
    p /= p.sum()
    keys = rng.permutation(len(p))[rng.choice(len(p), n_stream, p=p)]
    return pa.table({"sid": np.arange(n_stream, dtype=np.int64), "sk": keys}), master


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_master=st.integers(300, 3_000),
    width=st.sampled_from([8, 40, 96]),
    dup=st.sampled_from([1.0, 0.6, 0.3]),
    k=st.integers(2, 7),
    factor=st.floats(1.4, 3.0),
    seed=st.integers(0, 1_000),
)
def test_in_place_switch_in_exact_and_within_the_budget(
    n_master: int, width: int, dup: float, k: int, factor: float, seed: int
) -> None:
    """Budgets from 1.4x to 3x R's projected bytes: exact, the accounting equals the live arrays, peak <= 1.05x.

    When the complete cache is entered, H_R holds every row of R (with a key) exactly once.
    """
    stream, master = _wide(n_master, 40 * n_master, width, max(2, int(dup * n_master)), seed)
    b = -(-n_master // k)
    budget = int(factor * master.select(["mk", "mid", "pay"]).nbytes) + 6 * b * (width + 16)
    spec = JoinSpec("sk", "mk", ("mid", "pay"), memory_budget=budget, chunk_bytes=max(2_000, budget // 40))
    op = SemiStreamJoin(spec, ArrowMaster(master, b), stream.schema, master.schema)
    out: Counter[Any] = Counter()
    um: Counter[Any] = Counter()
    peak = 0.0
    for r in op.run(stream.to_batches(max_chunksize=max(200, n_master // 2))):
        out += as_multiset(r.enriched)
        um += as_multiset(r.unmatched)
        mem = r.metrics.memory
        if r.metrics.step > 0:
            peak = max(peak, mem.total / budget)
        held = mem.h_s + mem.h_r + mem.queue + mem.switching_buffer + mem.key_table + mem.prefetch + mem.r_filter
        assert live_bytes(op) == pytest.approx(held, rel=0.01, abs=256), (r.metrics.step, mem.to_dict())
        if op._switch_peak:
            assert mem.total >= op._switch_peak
    event(f"complete: {op.complete}, void: {op._c.extra.get('take_all_void', 0)}")
    assert out == batch_join(stream, master, "sk", "mk", ["mid", "pay"])
    assert um == unmatched_reference(stream, master, "sk", "mk")
    assert peak <= 1.05, f"peak {peak:.3f}x the budget"
    if op.complete:
        cached = Counter(zip(*(c.to_pylist() for c in op.cache.table().columns), strict=True))
        want = Counter(zip(*(master.column(c).to_pylist() for c in ("mk", "mid", "pay")), strict=True))
        assert cached == want


def test_in_place_switch_in_fits_where_the_rebuild_does_not() -> None:
    """At 2.1x R's projected bytes (96-byte payloads) only the in-place switch-in fits, and it completes."""
    stream, master = _wide(4_000, 200_000, 96, 2_500, 1)
    b = 1_000
    budget = int(2.1 * master.select(["mk", "mid", "pay"]).nbytes)
    spec = JoinSpec("sk", "mk", ("mid", "pay"), memory_budget=budget, chunk_bytes=budget // 40)
    op = SemiStreamJoin(spec, ArrowMaster(master, b), stream.schema, master.schema)
    out: Counter[Any] = Counter()
    only_in_place = False
    peak = 0.0
    for r in op.run(stream.to_batches(max_chunksize=2_000)):
        out += as_multiset(r.enriched)
        if r.metrics.step > 0:
            peak = max(peak, r.metrics.memory.total / budget)
        if holds_all_of_r(op) and not op._take_all and not op.complete:
            in_place, tables = _fits_both(op)
            only_in_place |= in_place and not tables
    assert only_in_place and op.complete and op._c.extra.get("take_all_void", 0) == 0
    assert out == batch_join(stream, master, "sk", "mk", ["mid", "pay"])
    assert peak <= 1.05, f"peak {peak:.3f}x the budget"


def test_in_place_s_b_voided_when_r_outgrows_the_store() -> None:
    """R grows mid take-all beyond the store: s_B is dropped, nothing switches in, the output stays exact."""
    rng = random.Random(13)
    master = RangeMaster(_master(rng), b=20, k=6, fixed=True)
    schema = _stream(rng, 0, 1).schema
    mschema = master.table().schema
    op = SemiStreamJoin(_spec(), master, schema, mschema)
    next_id = 0
    outputs: list[tuple[int, pa.Table, pa.Table]] = []
    pushed_at: dict[int, int] = {}
    batches: list[pa.Table] = []
    grown_at = None
    for step in range(20 * 6):
        if grown_at is None and op._take_all and op._store is not None and op._p == 2:
            for pk in range(120, 400):  # into the last (open) partition: more than the store's slack
                master.rows[pk] = (rng.randrange(0, 52), f"g-{pk}")
            grown_at = step
        batch = _stream(rng, next_id, 60)
        batches.append(batch)
        for i in range(next_id, next_id + 60):
            pushed_at[i] = step
        next_id += 60
        op.push(batch)
        res = op.step()
        outputs.append((step, res.enriched, res.unmatched))
    assert grown_at is not None and op._c.extra.get("take_all_void", 0) == 1
    for r in op.drain():
        outputs.append((-1, r.enriched, r.unmatched))
    # tuples that arrived before the change met the old R; those after it (an R-cycle on), the new one
    early_ids = {i for i, s in pushed_at.items() if s < grown_at - 6}
    late_ids = {i for i, s in pushed_at.items() if s >= grown_at + 6}
    mt = master.table()
    old = mt.filter(pc.less(mt.column("pk"), 120))
    for ids_, r in ((early_ids, old), (late_ids, mt)):
        out, um = _late_output(outputs, ids_)
        ids = pa.array(sorted(ids_), pa.int64())
        part = pa.concat_tables([t.filter(pc.is_in(t.column("id"), ids)) for t in batches])
        assert out == batch_join(part, r, "k", "key", ["pk", "v"])
        assert um == unmatched_reference(part, r, "k", "key")
    _check_totals(op)


def test_h_r_grown_under_cached_values_after_leaving_stays_within_the_budget() -> None:
    """R grows under cached values while complete: the mode is left, and the refresh may not grow H_R past the budget.

    The step's memory includes every H_R rebuild's temporaries (at their nbytes); H_R is
    emptied when its refresh does not fit (exact: an eviction). The probe's own temporaries
    (pairs of ~150 rows a tuple after the growth) are left out: they are not H_R's.
    """
    # rows of the cached values (0-39); the probe's temporaries of a 50-fold many-to-many burst are not H_R's
    run = _grow_while_complete(
        lambda rng: rng.randrange(0, 40), lambda op, res: res.metrics.memory.total - op._transient
    )
    assert run.op._c.extra.get("complete_left", 0) >= 1
    assert max(run.peaks) <= 1.05, f"peak {max(run.peaks):.3f}x the budget"


def test_fsm_rebuild_temporaries_are_reported_and_reserved() -> None:
    """An ordinary (FSM) switch-in's rebuild: its temporaries are in the step's memory and reserved after.

    A switch-in rebuilds H_R at the R-cycle start, before the step's probes and before its
    partition is read: what it held (with s_B's rows) is within the step's reported
    temporaries and disk buffer, and within the reserve and the disk buffer's room after.
    """
    stream, master = _zipf(5_000, 60_000)
    spec = JoinSpec("sk", "mk", ("mid", "attr"), memory_budget=120_000, chunk_bytes=20_000, complete_cache=False)
    op = SemiStreamJoin(spec, ArrowMaster(master, 1_000), stream.schema, master.schema)
    seen = 0
    for r in op.run(stream.to_batches(max_chunksize=4_000)):
        if op._c.switched_in and not seen:
            seen = op._start_rebuild_peak
            mem = r.metrics.memory
            assert seen > 0 and op._start_transient >= seen
            assert mem.transient + mem.disk_buffer >= op._start_transient
            assert mem.transient >= op._transient
    disk = max(op._disk_buffer_peak, op._disk_buffer_bytes)
    assert seen and B.temporaries_reserve(op) >= max(op._rebuild_peak, op._transient_peak)
    assert B.temporaries_reserve(op) + disk >= op._start_rebuild_peak
