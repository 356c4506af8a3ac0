"""Jobs added and removed mid-stream: each job's output is the batch join of the rows pushed while it ran."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import as_multiset
from shared_cases import JOBS, STREAMS, expected, interleave, make_stream, masters_for

from ssbj.shared.epochs import EpochedSharedJoin

SPECS = {j.name: j for j in JOBS}


def _want(active_rows: dict[str, list[pa.Table]], masters: Any) -> dict[str, tuple[Counter[Any], int, int]]:
    out = {}
    for name, parts in active_rows.items():
        job = SPECS[name]
        stream = pa.concat_tables(parts) if parts else STREAMS[job.stream].empty_table()
        want, n_um = expected(job, stream, masters[job.master].scan._table)
        n_in = stream.num_rows if job.filter is None else stream.filter(job.filter).num_rows
        out[name] = (want, n_um, n_in)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 300),
    keys=st.integers(1, 30),
    b=st.integers(1, 20),
    step=st.integers(1, 40),
    plan=st.lists(st.tuples(st.integers(0, 30), st.sets(st.sampled_from(sorted(SPECS)), max_size=6)), max_size=4),
    crash=st.one_of(st.none(), st.integers(0, 40)),
    seed=st.integers(0, 1 << 16),
)
def test_reconfiguration_is_exact(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    keys: int,
    b: int,
    step: int,
    plan: list[tuple[int, set[str]]],
    crash: int | None,
    seed: int,
) -> None:
    masters = masters_for(keys, keys, 2, b, seed)
    streams = {"orders": make_stream("orders", n, keys, seed + 1), "clicks": make_stream("clicks", n, keys, seed + 2)}
    batches = interleave(streams, 20)
    switches = {at: sorted(names) for at, names in plan}
    active = sorted(SPECS)[:3]
    esj = EpochedSharedJoin([SPECS[x] for x in active], STREAMS, masters, step_rows=step)
    rows: dict[str, list[pa.Table]] = {x: [] for x in SPECS}
    got: dict[str, list[pa.Table]] = {x: [] for x in SPECS}
    path = tmp_path_factory.mktemp("ep")
    for i, (stream, t) in enumerate(batches):
        if i in switches:  # a micro-batch boundary: switch, then checkpoint (the epoch boundary)
            active = switches[i]
            esj.reconfigure([SPECS[x] for x in active])
        if crash == i:
            esj.checkpoint(path, i + 1)
            for _ in range(3):  # work after the checkpoint is lost
                if esj.pending(drain=True):
                    esj.step(drain=True)
            fresh = EpochedSharedJoin([SPECS[x] for x in active], STREAMS, masters, step_rows=step)
            assert fresh.restore(path, SPECS) == i + 1
            esj = fresh
        for x in active:
            if SPECS[x].stream == stream:
                rows[x].append(t)
        esj.push(stream, t)
        while esj.pending():
            for k, out in esj.step().items():
                got[k].append(out)
    for out in esj.drain():
        for k, t in out.items():
            got[k].append(t)
    counts = esj.counts()
    for name, (want, n_um, n_in) in _want(rows, masters).items():
        t = pa.concat_tables(got[name]) if got[name] else None
        assert (as_multiset(t) if t is not None else Counter()) == want, name
        c = counts.get(name)
        if c is None:
            assert n_in == 0
            continue
        assert (c.tuples_in, c.unmatched, c.waiting) == (n_in, n_um, 0), name
