"""The disk phase reading a partition in pieces (``JoinSpec.disk_chunk_rows``).

* exact against a plain batch join, at piece sizes down to one row, with a restore
  mid-R-cycle;
* step for step the same output as the whole-partition disk phase (no budget: the same
  w), while R changes between R-cycles, so the statistics, s_B, switching and the cache
  refresh see a partition in pieces exactly as they saw it whole;
* a master that cannot stream is read whole and charged whole;
* under a budget the disk buffer is charged one piece and the peak stays <= 1.05x.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from core_scenarios import KEY, drifting
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import as_multiset, batch_join, unmatched_reference

from ssbj.core import ArrowMaster, CostConstants, CostModel, JoinSpec, SemiStreamJoin, plan_memory
from ssbj.core.arrowtypes import take_rows
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.rowsize import row_nbytes
from ssbj.errors import ConfigError

PIECES = st.sampled_from([1, 2, 3, 5, 64])


class MutableMaster:
    """R as a list of rows in b-row partitions, changed by the test between steps; streams pieces."""

    def __init__(self, keys: list[int | None], b: int, chunks: bool = True) -> None:
        self.keys = list(keys)
        self.vals = list(range(len(keys)))
        self._b = b
        self.chunks = chunks
        self.reads: list[int] = []  # rows per read call (a piece, or a whole partition)

    @property
    def partition_rows(self) -> int:
        return self._b

    @property
    def num_rows(self) -> int:
        return len(self.keys)

    def num_partitions(self) -> int:
        return max(1, -(-len(self.keys) // self._b))

    def table(self) -> pa.Table:
        return pa.table({"mk": pa.array(self.keys, pa.int64()), "mval": pa.array(self.vals, pa.int64())})

    def read_partition(self, p: int) -> pa.Table:
        t = self.table().slice(p * self._b, self._b)
        self.reads.append(t.num_rows)
        return pa.table({c: pa.array(t.column(c).to_pylist(), t.column(c).type) for c in t.column_names})

    def read_partition_chunks(self, p: int, rows: int) -> Iterator[pa.Table]:
        if not self.chunks:
            raise AssertionError("a master without chunks must not be asked for them")
        t = self.table().slice(p * self._b, self._b)
        for i in range(0, t.num_rows, rows):
            piece = t.slice(i, rows)
            self.reads.append(piece.num_rows)
            yield pa.table({c: pa.array(piece.column(c).to_pylist(), piece.column(c).type) for c in t.column_names})

    def repartition(self, partition_rows: int) -> MutableMaster:
        return MutableMaster(self.keys, partition_rows, self.chunks)


class WholeMaster(MutableMaster):
    """The same R without :class:`ssbj.contracts.MasterChunks`: only whole partitions."""

    read_partition_chunks = None  # type: ignore[assignment]


class StreamingArrowMaster(ArrowMaster):
    """The same in-memory R without :class:`ssbj.contracts.MasterResident`: read in pieces."""

    resident_partition = None  # type: ignore[assignment]


@st.composite
def scenario(draw: Any) -> dict[str, Any]:
    master_keys = draw(st.lists(KEY, max_size=40))
    hot1 = draw(st.lists(st.integers(0, 15), min_size=1, max_size=4))
    hot2 = draw(st.lists(st.integers(0, 15), min_size=1, max_size=4))
    seg1 = draw(st.lists(st.one_of(st.sampled_from(hot1), KEY), max_size=250))
    seg2 = draw(st.lists(st.one_of(st.sampled_from(hot2), KEY), max_size=250))
    return {
        "master_keys": master_keys,
        "stream_keys": seg1 + seg2,
        "b": draw(st.integers(1, 12)),
        "pieces": draw(PIECES),
        "chunk_bytes": draw(st.integers(1, 200)),
        "batch": draw(st.integers(1, 60)),
        "algorithm": draw(st.sampled_from(["ssbj", "meshjoin"])),
        "switch_factor": draw(st.sampled_from([0.5, 1.0, 2.0])),
        "eviction_interval": draw(st.sampled_from([1, 2, 10])),
        "cut": draw(st.integers(0, 400)),
        "memory_budget": draw(st.one_of(st.none(), st.integers(1, 200_000))),
        "r_filter": draw(st.sampled_from(["auto", "always", "off"])),
        "change_at": draw(st.integers(0, 60)),
        "changes": draw(st.lists(st.tuples(st.integers(0, 39), KEY), max_size=6)),
    }


def _stream(sc: dict[str, Any]) -> pa.Table:
    sk = sc["stream_keys"]
    return pa.table({"sid": pa.array(range(len(sk)), pa.int64()), "sk": pa.array(sk, pa.int64())})


def _spec(sc: dict[str, Any], pieces: int | None, budget: bool = True) -> JoinSpec:
    return JoinSpec(
        "sk",
        "mk",
        ("mval", "mk"),
        algorithm=sc["algorithm"],
        chunk_bytes=sc["chunk_bytes"],
        switch_factor=sc["switch_factor"],
        eviction_interval=sc["eviction_interval"],
        memory_budget=sc["memory_budget"] if budget else None,
        r_filter=sc["r_filter"],
        disk_chunk_rows=pieces,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario())
def test_pieces_exact_across_save_restore(sc: dict[str, Any], tmp_path_factory: Any) -> None:
    stream = _stream(sc)
    master = MutableMaster(sc["master_keys"], sc["b"])
    spec = _spec(sc, sc["pieces"])
    op = SemiStreamJoin(spec, master, stream.schema, master.table().schema)
    for b in stream.to_batches(max_chunksize=sc["batch"]):
        op.push(b)
    out: Counter[Any] = Counter()
    unmatched: Counter[Any] = Counter()
    for _ in range(sc["cut"]):  # a restore anywhere, mid-R-cycle included
        if not op.waiting_tuples:
            break
        r = op.step()
        out += as_multiset(r.enriched)
        unmatched += as_multiset(r.unmatched)
    store = DirectoryStore(tmp_path_factory.mktemp("ckpt"))
    op.checkpoint(store, 0)
    op = SemiStreamJoin.restore(store, spec, master, stream.schema, master.table().schema)
    while op.waiting_tuples:
        r = op.step()
        out += as_multiset(r.enriched)
        unmatched += as_multiset(r.unmatched)
    assert out == batch_join(stream, master.table(), "sk", "mk", ["mval", "mk"])
    assert unmatched == unmatched_reference(stream, master.table(), "sk", "mk")
    assert max(master.reads, default=0) <= sc["pieces"]  # only pieces were ever read
    t = op.totals()
    assert t["tuples_in"] == t["matched_source_rows"] + t["unmatched_source_rows"] + t["waiting"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario())
def test_pieces_step_for_step_as_whole_partitions_while_r_changes(sc: dict[str, Any]) -> None:
    stream = _stream(sc)

    def steps(pieces: int | None) -> list[tuple[Counter[Any], Counter[Any], int]]:
        master = MutableMaster(sc["master_keys"], sc["b"])
        op = SemiStreamJoin(_spec(sc, pieces, budget=False), master, stream.schema, master.table().schema)
        for b in stream.to_batches(max_chunksize=sc["batch"]):
            op.push(b)
        got = []
        while op.waiting_tuples:
            if len(got) == sc["change_at"]:  # updates, inserts (None->key) and deletes (key->None) of R
                for i, key in sc["changes"]:
                    if i < len(master.keys):
                        master.keys[i] = key
                        master.vals[i] += 1000
            r = op.step()
            got.append((as_multiset(r.enriched), as_multiset(r.unmatched), r.metrics.b))
            assert all(row[1] == row[3] for row in got[-1][0])  # stream key == master key, never NULL
        return got

    assert steps(sc["pieces"]) == steps(None)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario())
def test_resident_partition_probed_in_one_pass_as_in_pieces(sc: dict[str, Any]) -> None:
    """An in-memory R probed whole (int64 keys, no NULLs in the partition) gives what its pieces give.

    Partitions with NULL keys go the pieces' way; the disk buffer is charged one piece
    either way (the resident pass holds no validity array).
    """
    stream = _stream(sc)
    table = MutableMaster(sc["master_keys"], sc["b"]).table()

    def steps(master: ArrowMaster) -> tuple[list[tuple[Counter[Any], Counter[Any], int]], list[int]]:
        op = SemiStreamJoin(_spec(sc, sc["pieces"], budget=False), master, stream.schema, table.schema)
        for b in stream.to_batches(max_chunksize=sc["batch"]):
            op.push(b)
        got, charged = [], []
        while op.waiting_tuples:
            r = op.step()
            got.append((as_multiset(r.enriched), as_multiset(r.unmatched), r.metrics.b))
            charged.append(r.metrics.memory.disk_buffer)
        return got, charged

    resident, charged_r = steps(ArrowMaster(table, sc["b"]))
    streamed, charged_s = steps(StreamingArrowMaster(table, sc["b"]))
    assert resident == streamed
    # the pieces' key validity arrays (1 B a row) are all that the resident pass does not hold, but
    # for the columns' null bitmaps (a piece read anew has one only if it holds a NULL; a resident
    # slice shares its column's): up to one bit a row a column, either way. A partition with NULL
    # keys is charged as if its every piece held one (their encoding is a copy: 8 B a row more)
    bitmaps = table.num_columns * -(-sc["pieces"] // 8)
    nulls = 8 * sc["pieces"] if None in sc["master_keys"] else 0
    assert all(
        s - sc["pieces"] - bitmaps <= r <= s + bitmaps + nulls for r, s in zip(charged_r, charged_s, strict=True)
    )


@pytest.mark.parametrize("rows", [0, 3])
def test_resident_partition_without_chunks(rows: int) -> None:
    """A resident R whose partitions have no chunk at all (built from no batches) or one: exact either way."""
    schema = pa.schema([("mk", pa.int64()), ("mval", pa.int64())])
    batches = [pa.record_batch([pa.array(range(rows), pa.int64())] * 2, schema=schema)] if rows else []
    table = pa.Table.from_batches(batches, schema)
    stream = pa.table({"sid": pa.array(range(6), pa.int64()), "sk": pa.array([0, 1, 2, 5, None, 1], pa.int64())})
    op = SemiStreamJoin(
        JoinSpec("sk", "mk", ("mval", "mk"), disk_chunk_rows=1), ArrowMaster(table, 2), stream.schema, schema
    )
    out: Counter[Any] = Counter()
    for r in op.run(stream.to_batches()):
        out += as_multiset(r.enriched)
    assert out == batch_join(stream, table, "sk", "mk", ["mval", "mk"])


def test_master_without_pieces_is_read_and_charged_whole() -> None:
    keys = [i % 7 for i in range(100)]
    stream = pa.table(
        {"sid": pa.array(range(300), pa.int64()), "sk": pa.array([i % 9 for i in range(300)], pa.int64())}
    )
    sc = {"algorithm": "ssbj", "chunk_bytes": 400, "switch_factor": 1.0, "eviction_interval": 2}
    sc |= {"memory_budget": None, "r_filter": "off"}
    charged = {}
    for name, master in (("whole", WholeMaster(keys, 25)), ("pieces", MutableMaster(keys, 25))):
        op = SemiStreamJoin(_spec(sc, 5), master, stream.schema, master.table().schema)
        out: Counter[Any] = Counter()
        for r in op.run(stream.to_batches(max_chunksize=50)):
            out += as_multiset(r.enriched)
        assert out == batch_join(stream, master.table(), "sk", "mk", ["mval", "mk"])
        assert max(master.reads) == (25 if name == "whole" else 5)
        charged[name] = op._disk_buffer_peak
    assert charged["whole"] > 4 * charged["pieces"]


@pytest.mark.parametrize("algorithm", ["ssbj", "meshjoin"])
@pytest.mark.parametrize("budget", [60_000, 150_000, 400_000])
def test_planned_pieces_hold_the_budget(algorithm: str, budget: int, tmp_path: Any) -> None:
    """The planner's b with pieces: peak <= 1.05x, through drift, eviction and a restore."""
    stream, master = drifting(20_000, 120_000)
    v_s = float(row_nbytes(stream.slice(0, 1000)).mean())
    v_r = float(row_nbytes(master.select(["mid", "attr"]).slice(0, 1000)).mean())
    plan = plan_memory(budget, master.num_rows, v_s, v_r, CostModel(), chunked=True)
    # where the planner reads partitions whole (b below one piece), pieces of a fifth of b
    # test the operator's accounting of them
    pieces = plan.disk_chunk_rows or max(1, plan.partition_rows // 5)
    assert pieces < plan.partition_rows
    spec = JoinSpec(
        "sk",
        "mk",
        ("mid", "attr"),
        algorithm=algorithm,  # type: ignore[arg-type]
        memory_budget=budget,
        chunk_bytes=plan.chunk_bytes,
        eviction_interval=3,
        disk_chunk_rows=pieces,
    )
    op = SemiStreamJoin(spec, ArrowMaster(master, plan.partition_rows), stream.schema, master.schema)
    batches = stream.to_batches(max_chunksize=4_000)
    out: Counter[Any] = Counter()
    peaks: list[float] = []
    for i, b in enumerate(batches):
        if i == len(batches) // 2:
            store = DirectoryStore(tmp_path / "ckpt")
            op.checkpoint(store, 1)
            op = SemiStreamJoin.restore(store, spec, op.master, stream.schema, master.schema)
        op.push(b)
        while op.buffered_tuples:
            r = op.step()
            out += as_multiset(r.enriched)
            if r.metrics.step > 0:
                peaks.append(r.metrics.memory.total / budget)
                # one piece is charged, not the partition
                assert r.metrics.memory.disk_buffer <= 1.5 * pieces * (v_r + 8 + 9)
    for r in op.drain():
        out += as_multiset(r.enriched)
        peaks.append(r.metrics.memory.total / budget)
    assert out == batch_join(stream, master, "sk", "mk", ["mid", "attr"])
    assert max(peaks) <= 1.05, f"peak {max(peaks):.3f}x the budget"


@pytest.mark.parametrize("pieces", [1, 3, 7])
def test_refresh_sees_every_piece_of_a_partition(pieces: int) -> None:
    """Hot values cached with rows in every piece; R changes twice: each piece's rows are refreshed."""
    keys: list[int | None] = [i % 5 for i in range(40)]
    sk = [(i * 7) % 3 if i % 4 else 4 + i % 9 for i in range(6000)]
    stream = pa.table({"sid": pa.array(range(len(sk)), pa.int64()), "sk": pa.array(sk, pa.int64())})
    sc = {"algorithm": "ssbj", "chunk_bytes": 2_000, "switch_factor": 1.0, "eviction_interval": 2}
    sc |= {"memory_budget": None, "r_filter": "off"}

    def run(n: int | None) -> tuple[list[tuple[Counter[Any], Counter[Any]]], int]:
        master = MutableMaster(keys, 10)
        op = SemiStreamJoin(_spec(sc, n), master, stream.schema, master.table().schema)
        got = []
        for i, b in enumerate(stream.to_batches(max_chunksize=200)):
            if i in (12, 20):  # update every row; delete one row of value 0, insert one of value 9
                master.vals = [v + 1000 for v in master.vals]
                master.keys[0 if i == 12 else 5] = None if i == 12 else 9
            op.push(b)
            while op.buffered_tuples:
                r = op.step()
                got.append((as_multiset(r.enriched), as_multiset(r.unmatched)))
        for r in op.drain():
            got.append((as_multiset(r.enriched), as_multiset(r.unmatched)))
        return got, int(op.totals()["served_by_cache"])

    whole, cached = run(None)
    assert cached > 1000  # the cache served, so the refresh had rows to replace
    # NULL keys never match: the row whose key became NULL is not served (it once was, by the refresh)
    assert all(row[1] == row[3] for step in whole for row in step[0])
    assert run(pieces)[0] == whole


def test_planner_sizes_the_disk_buffer_as_one_piece() -> None:
    """With pieces b costs no memory: the buffer is one piece; the predicted rate is at least the whole one."""
    model = CostModel(CostConstants(c_piece=20_000))
    whole = plan_memory(720_000, 2_000_000, 32.0, 36.0, model)
    pieces = plan_memory(720_000, 2_000_000, 32.0, 36.0, model, chunked=True)
    assert whole.disk_chunk_rows is None
    assert pieces.disk_chunk_rows is not None and pieces.disk_chunk_rows < pieces.partition_rows
    assert pieces.disk_chunk_rows < whole.partition_rows  # a smaller buffer ...
    assert pieces.partition_rows > whole.partition_rows  # ... and fewer, larger steps per R-cycle
    assert pieces.w_s * pieces.partitions > whole.w_s * whole.partitions  # more tuples held per R-cycle
    assert pieces.predicted_service_rate >= whole.predicted_service_rate
    # an R smaller than 32 rows has fewer partitions than the k floor: still a plan
    tiny = plan_memory(64_000_000, 2, 24.0, 19.5, model, chunked=True)
    assert tiny.partitions >= 1 and tiny.disk_chunk_rows is None
    # read ahead holds whole partitions: no pieces then
    assert plan_memory(720_000, 2_000_000, 32.0, 36.0, model, prefetch=1, chunked=True).disk_chunk_rows is None


def test_resident_pieces_cost_the_plan_no_time() -> None:
    """A resident master's pieces bound the buffer only: c_piece no longer moves the plan; a streamed one's does."""
    plans = {
        (c, resident): plan_memory(
            640_000, 2_000_000, 28.0, 32.0, CostModel(CostConstants(c_piece=c)), chunked=True, resident=resident
        )
        for c in (0.0, 120_000.0, 1_000_000.0)
        for resident in (False, True)
    }
    free = plans[(0.0, False)]
    for c in (0.0, 120_000.0, 1_000_000.0):
        assert plans[(c, True)] == free  # the same plan, whatever a streamed piece would cost
    streamed = plans[(1_000_000.0, False)]
    assert streamed.predicted_service_rate < free.predicted_service_rate
    assert streamed.partition_rows < free.partition_rows  # smaller partitions: fewer pieces to pay per step


def test_arrow_master_pieces_concatenate_to_the_partition() -> None:
    t = pa.table({"mk": pa.array(range(23), pa.int64()), "s": pa.array([f"v{i}" for i in range(23)])})
    m = ArrowMaster(t, 10)
    for p in range(m.num_partitions()):
        for rows in (1, 3, 10, 50):
            got = list(m.read_partition_chunks(p, rows))
            assert all(0 < g.num_rows <= rows for g in got)
            assert pa.concat_tables(got).equals(m.read_partition(p))
    with pytest.raises(ConfigError):
        next(m.read_partition_chunks(0, 0))
    with pytest.raises(ConfigError):
        JoinSpec("sk", "mk", disk_chunk_rows=0)


@pytest.mark.parametrize("chunked", [False, True])
def test_take_rows_equals_arrow_take(chunked: bool) -> None:
    t = pa.table({"a": pa.array([1, None, 3, 4]), "b": pa.array(["x", "y", None, "zz"])})
    if chunked:
        t = pa.concat_tables([t.slice(0, 2), t.slice(2)])
    idx = np.array([3, 0, 0, 2], np.int64)
    assert take_rows(t, idx).equals(t.take(pa.array(idx)))
    assert take_rows(t, idx[:0]).num_rows == 0


def test_planner_chooses_k_by_the_cost_model() -> None:
    """No floor on k: the per-step fixed cost is traded against the bytes that grow with a step."""
    for budget in (720_000, 7_200_000):
        plans = [
            plan_memory(budget, 2_000_000, 32.0, 36.0, CostModel(CostConstants(c_fixed=c)), chunked=True)
            for c in (20_000, 100_000, 2_000_000)
        ]
        ks = [p.partitions for p in plans]
        assert ks == sorted(ks, reverse=True) and ks[0] > ks[-1]  # a dearer step: fewer, larger steps
        assert ks[-1] < 32
        # larger steps hold fewer tuples per R-cycle (the step's bytes grow with w)
        assert plans[2].w_s * plans[2].partitions < plans[1].w_s * plans[1].partitions


def _probe_calls(monkeypatch: Any) -> list[int]:
    """Rows of every disk-phase kernel call from now on (the master rows it was handed)."""
    import ssbj.core.diskphase as DP

    calls: list[int] = []
    probe = DP.disk_probe

    def counted(*a: Any) -> Any:
        calls.append(len(a[0]))
        return probe(*a)

    monkeypatch.setattr(DP, "disk_probe", counted)
    return calls


def test_chunked_arrow_master_is_held_in_one_chunk_and_probed_in_one_pass(monkeypatch: Any) -> None:
    """A master read in chunks (as ``pq.read_table`` returns a Parquet file) is held one chunk a column.

    Its partitions span the chunks; as views of one chunk they are probed in one compiled
    pass each, not in ``disk_chunk_rows`` pieces (~8x slower at 1% of R on a 2M-row master).
    """
    n = 50
    whole = pa.table({"mk": pa.array([i % 17 for i in range(n)], pa.int64()), "s": [f"v{i}" for i in range(n)]})
    chunked = pa.concat_tables([whole.slice(i, 7) for i in range(0, n, 7)])
    assert chunked.column(0).num_chunks == 8
    master = ArrowMaster(chunked, 20)
    assert master.table.equals(whole)
    assert all(c.num_chunks == 1 for c in master.table.columns)
    assert all(master.resident_partition(p).column(0).num_chunks == 1 for p in range(master.num_partitions()))
    calls = _probe_calls(monkeypatch)
    stream = pa.table({"sid": pa.array(range(40), pa.int64()), "sk": pa.array([i % 23 for i in range(40)], pa.int64())})
    op = SemiStreamJoin(JoinSpec("sk", "mk", ("s",), disk_chunk_rows=3), master, stream.schema, chunked.schema)
    out: Counter[Any] = Counter()
    for r in op.run(stream.to_batches(max_chunksize=8)):
        out += as_multiset(r.enriched)
    assert out == batch_join(stream, whole, "sk", "mk", ["s"])
    assert calls and set(calls) <= {20, 10}  # whole partitions (the last holds 10 rows), never 3-row pieces


@pytest.mark.parametrize(
    "keys",
    [
        pa.array([i % 17 for i in range(50)], pa.int32()),
        pa.array([None if i % 9 == 4 else i % 17 for i in range(50)], pa.int64()),
        pa.array([None if i % 11 == 3 else f"k{i % 17}" for i in range(50)], pa.string()),
    ],
    ids=["int32", "int64-nulls", "string-nulls"],
)
def test_resident_keys_other_than_plain_int64_are_probed_in_one_pass(keys: pa.Array, monkeypatch: Any) -> None:
    """Keys that need encoding (other widths, hashed strings, NULLs) are encoded once for the whole master.

    Each partition is then one compiled pass, exact as the pieces (NULL keys never match),
    and the disk buffer is charged what a piece and its encoded keys would hold.
    """
    master = pa.table({"mk": keys, "s": [f"v{i}" for i in range(50)]})
    sk = pa.array([None if i % 13 == 0 else i % 23 for i in range(40)], pa.int64()).cast(keys.type)
    if pa.types.is_string(keys.type):
        sk = pa.array([None if i % 13 == 0 else f"k{i % 23}" for i in range(40)])
    stream = pa.table({"sid": pa.array(range(40), pa.int64()), "sk": sk})
    calls = _probe_calls(monkeypatch)
    spec = JoinSpec("sk", "mk", ("s",), disk_chunk_rows=3)
    op = SemiStreamJoin(spec, ArrowMaster(master, 20), stream.schema, master.schema)
    out: Counter[Any] = Counter()
    charged = []
    for r in op.run(stream.to_batches(max_chunksize=8)):
        out += as_multiset(r.enriched)
        charged.append(r.metrics.memory.disk_buffer)
    assert out == batch_join(stream, master, "sk", "mk", ["s"])
    assert calls and set(calls) <= {20, 10}
    piece = max(master.slice(i, 3).nbytes for i in range(0, 50, 3))
    assert max(charged) <= piece + 9 * 3
