"""The pipelined switching FSM (``JoinSpec.switching``) against Algorithm 1's R-cycles.

Exactness against the plain batch join, how soon values switch, and restores across the
two (a checkpoint of Algorithm 1's R-cycles continues pipelined; the reverse is refused).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pa_compute
import pytest
from core_scenarios import checkpoint_after, drifting, drifting_keys, key_tables
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import as_multiset, batch_join, unmatched_reference

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.checkpoint import DirectoryStore
from ssbj.errors import CheckpointError


def _spec(switching: str, **kw: Any) -> JoinSpec:
    return JoinSpec("sk", "mk", ("attr", "mk"), chunk_bytes=4_000, switching=switching, **kw)


def _switch_ins(switching: str, r_cycles: int) -> list[int]:
    """Values switched in by the start of each R-cycle 1..r_cycles, on a drifting Zipf-1 stream."""
    stream, master = drifting(4_000, 200_000)
    op = SemiStreamJoin(_spec(switching), ArrowMaster(master, 200), stream.schema, master.schema)
    for b in stream.to_batches(max_chunksize=2_000):
        op.push(b)
    seen: dict[int, int] = {}
    while op.waiting_tuples and op.r_cycle <= r_cycles:
        op.step()
        seen.setdefault(op.r_cycle, op.totals()["switched_in"])
    return [seen.get(rc, 0) for rc in range(1, r_cycles + 1)]


def test_pipelined_switches_sooner_and_more() -> None:
    paper = _switch_ins("paper", 7)
    pipelined = _switch_ins("pipelined", 7)
    # Algorithm 1: the first phase-out at R-cycle 3, the next at 6; pipelined: every start from 3
    assert paper[:2] == [0, 0] and pipelined[:2] == [0, 0]
    assert paper[3] == paper[2] > 0  # nothing between two phase-outs
    assert pipelined[3] > pipelined[2] > 0
    assert pipelined[6] > paper[6]


@st.composite
def scenario(draw: Any) -> dict[str, Any]:
    master_keys, stream_keys = drifting_keys(draw)
    return {
        "master_keys": master_keys,
        "stream_keys": stream_keys,
        "strings": draw(st.booleans()),
        "b": draw(st.integers(1, 12)),
        "batch": draw(st.integers(1, 60)),
        "cut": draw(st.integers(0, 300)),
        "memory_budget": draw(st.one_of(st.none(), st.integers(2_000, 200_000))),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario())
def test_algorithm_1_checkpoint_restored_pipelined_is_exact(sc: dict[str, Any], tmp_path_factory: Any) -> None:
    stream, master = key_tables(sc)
    master = master.rename_columns(["mk", "attr"])
    store = DirectoryStore(tmp_path_factory.mktemp("ckpt"))
    op = SemiStreamJoin(
        _spec("paper", memory_budget=sc["memory_budget"], switch_factor=0.5, eviction_interval=2),
        ArrowMaster(master, sc["b"]),
        stream.schema,
        master.schema,
    )
    for b in stream.to_batches(max_chunksize=sc["batch"]):
        op.push(b)
    out: Counter[Any] = Counter()
    unmatched: Counter[Any] = Counter()
    for _ in range(sc["cut"]):
        if not op.waiting_tuples:
            break
        r = op.step()
        out += as_multiset(r.enriched)
        unmatched += as_multiset(r.unmatched)
    op.checkpoint(store, 1)
    restored = SemiStreamJoin.restore(
        store,
        _spec("pipelined", memory_budget=sc["memory_budget"], switch_factor=0.5, eviction_interval=2),
        ArrowMaster(master, sc["b"]),
        stream.schema,
        master.schema,
    )
    while restored.waiting_tuples:
        r = restored.step()
        out += as_multiset(r.enriched)
        unmatched += as_multiset(r.unmatched)
    assert out == batch_join(stream, master, "sk", "mk", ["attr", "mk"])
    assert unmatched == unmatched_reference(stream, master, "sk", "mk")


def test_pipelined_checkpoint_does_not_restore_into_algorithm_1(tmp_path: Path) -> None:
    stream, master = drifting(1_000, 20_000)
    op = SemiStreamJoin(_spec("pipelined"), ArrowMaster(master, 100), stream.schema, master.schema)
    store = checkpoint_after(op, stream, 2_000, 15, tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match="pipelined"):
        SemiStreamJoin.restore(store, _spec("paper"), ArrowMaster(master, 100), stream.schema, master.schema)
    again = SemiStreamJoin.restore(store, _spec("pipelined"), ArrowMaster(master, 100), stream.schema, master.schema)
    assert again.r_cycle == op.r_cycle


def _run_all(op: SemiStreamJoin, stream: Any) -> tuple[Counter[Any], Counter[Any]]:
    for b in stream.to_batches(max_chunksize=2_000):
        op.push(b)
    out: Counter[Any] = Counter()
    unmatched: Counter[Any] = Counter()
    while op.waiting_tuples:
        r = op.step()
        out += as_multiset(r.enriched)
        unmatched += as_multiset(r.unmatched)
    return out, unmatched


def test_early_switches_bring_values_admitted_mid_r_cycle_in_sooner(monkeypatch: pytest.MonkeyPatch) -> None:
    early = _switch_ins("pipelined", 6)
    monkeypatch.setattr("ssbj.core.rcycle.early_rows", lambda op: 0)
    counted = _switch_ins("pipelined", 6)
    # a value admitted during R-cycle rc - 1 switches in at the start of rc + 1, not rc + 2
    assert early[2] > counted[2] > 0
    assert sum(early) > sum(counted)


def test_an_early_switch_given_up_drops_its_rows_and_stays_exact() -> None:
    # every value has one master row but the stream's hottest, which has 25: the early
    # reserve (the counted values' rows, 1) is too small for it, so it gives up, its rows
    # leave s_B, and it decides again on its own count
    stream, master = drifting(4_000, 60_000)
    mk = master.column("mk").to_numpy()
    _, first = np.unique(mk, return_index=True)
    master = master.take(np.sort(first))
    keys, counts = np.unique(stream.column("sk").to_numpy(), return_counts=True)
    present = np.isin(keys, master.column("mk").to_numpy())
    hot_key = int(keys[present][np.argmax(counts[present])])
    hot = master.filter(pa_compute.equal(master.column("mk"), hot_key))
    master = pa.concat_tables([master, *([hot] * 24)])
    op = SemiStreamJoin(_spec("pipelined"), ArrowMaster(master, 150), stream.schema, master.schema)
    out, unmatched = _run_all(op, stream)
    extra = op._c.extra
    assert extra.get("switch_early", 0) > 0
    assert extra.get("switch_early_given_up", 0) > 0
    assert out == batch_join(stream, master, "sk", "mk", ["attr", "mk"])
    assert unmatched == unmatched_reference(stream, master, "sk", "mk")
