"""The hybrid step priced by measured costs (ssbj.core.pathcost) when no cost constants are given."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from reference import as_multiset, batch_join

from ssbj.core import ArrowMaster, CostConstants, CostModel, JoinSpec, SemiStreamJoin
from ssbj.core.pathcost import MIN_ROWS, RETRY, WINDOW, PathCosts

MCOLS = ["mval"]


def test_unmeasured_paths_are_priced_by_the_model() -> None:
    model = CostModel(CostConstants(c_rt=50_000.0, c_key=2_000.0, c_row=1_000.0, c_io_row=1_000.0))
    pc = PathCosts()
    assert pc.scan_cost(model, 1_000) == model.scan_cost(1_000)
    assert pc.lookup_cost(model, 10, 12, 500) == model.lookup_cost(10, 12, 500)
    pc.note_read(MIN_ROWS - 1, 1.0)  # too few rows to measure a per-row cost
    pc.note_lookup(0, 1.0)
    assert pc.scan_cost(model, 1_000) == model.scan_cost(1_000)
    assert pc.lookup_cost(model, 10, 12, 500) == model.lookup_cost(10, 12, 500)


def test_measured_paths_use_the_median_of_the_last_window() -> None:
    model = CostModel(CostConstants(c_h=40.0, c_b=5.0))
    pc = PathCosts()
    for s in (1.0, 100.0, 2.0):  # per row: 1 ms, 100 ms (an outlier), 2 ms
        pc.note_read(1_000, s)
    assert pc.scan_cost(model, 500) == pytest.approx(500 * 2e-3 + 1e-9 * 500 * 45)
    for _ in range(WINDOW):
        pc.note_lookup(4, 4e-5)  # 10 us a key
    pc.note_lookup(4, 4.0)
    assert pc.lookup_cost(model, 100, 100, 500) == pytest.approx(100 * 1e-5)
    for _ in range(WINDOW):  # the window forgets
        pc.note_lookup(2, 2.0)
    assert pc.lookup_cost(model, 100, 100, 500) == pytest.approx(100.0)


def test_a_path_that_keeps_losing_is_measured_again_ever_more_rarely() -> None:
    pc = PathCosts()
    taken = [pc.choose(False) for _ in range(RETRY + 2 * RETRY + 4 * RETRY)]  # the scan always cheaper
    # the lookup is taken once after RETRY lost decisions, then after 2 RETRY, then 4 RETRY
    assert [i for i, t in enumerate(taken) if t] == [RETRY - 1, 3 * RETRY - 1, 7 * RETRY - 1]
    assert pc.choose(True) is True  # once it wins, it waits RETRY again when it next loses
    assert [pc.choose(False) for _ in range(RETRY)].count(True) == 1


class SlowReads(ArrowMaster):
    """An in-memory master whose partition reads cost what a database's do (~20 us a row)."""

    def read_partition(self, p: int) -> pa.Table:
        t = super().read_partition(p)
        time.sleep(20e-6 * t.num_rows)
        return t


class SlowFirstLookup(SlowReads):
    """Slow reads, and a first lookup that takes 100 ms (a cold statement on a busy machine)."""

    first = True

    def lookup(self, key: str, values: pa.Array) -> pa.Table:
        if self.first:
            self.first = False
            time.sleep(0.1)
        return super().lookup(key, values)


def _paths(
    cost_model: CostModel | None, master_type: type[SlowReads] = SlowReads, n: int = 400
) -> tuple[Counter[str], Counter[Any], Counter[Any]]:
    master = pa.table({"mk": [i % 150 for i in range(200)], "mval": list(range(200))})
    stream = pa.table({"sid": list(range(n)), "sk": [i * 7 % 180 for i in range(n)]})
    spec = JoinSpec("sk", "mk", tuple(MCOLS), algorithm="meshjoin", hybrid="auto", chunk_bytes=1 << 30)
    op = SemiStreamJoin(spec, master_type(master, 100), stream.schema, master.schema, cost_model)
    paths: Counter[str] = Counter()
    out: Counter[Any] = Counter()
    for b in stream.to_batches(max_chunksize=8):  # few keys wait at each step
        op.push(b)
        r = op.step()
        paths[r.metrics.path] += 1
        out += as_multiset(r.enriched)
    for r in op.drain():
        out += as_multiset(r.enriched)
    return paths, out, batch_join(stream, master, "sk", "mk", MCOLS)


def test_slow_reads_make_auto_look_up_when_measured() -> None:
    """Given no constants, the operator finds the reads dear and looks the few waiting keys up instead."""
    measured, out, want = _paths(None)
    assert out == want
    # the defaults price a read at 30 ns a row: with them the 8 keys of a step are scanned for
    given, out_given, _ = _paths(CostModel())
    assert out_given == want
    assert given["lookup"] < 0.2 * sum(given.values())
    assert measured["lookup"] > 0.8 * sum(measured.values())


def test_one_slow_lookup_does_not_keep_the_lookup_out() -> None:
    """The first lookup's 100 ms prices it out; it is measured again, and it wins from then on."""
    paths, out, want = _paths(None, SlowFirstLookup, n=800)
    assert out == want
    # 100 steps: one slow lookup, RETRY + 2 RETRY scans at most before the window's median is fast again
    assert paths["lookup"] > 100 - 3 * RETRY - 10
