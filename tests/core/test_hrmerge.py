"""H_R's rebuild (merged runs, or a switch-in or eviction alone in place) against a plain reference.

The reference keeps the rows of values not dropped and not read from the refreshed partition,
appends the added rows, and sorts all of them by (value, partition) with a stable sort
(read order kept): each value's run (its rows, their order and tags) and the index's runs
must agree. Runs themselves may come in any order: a switch-in alone appends its values'.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ssbj.core.cache import HR_SINCE, Cache
from ssbj.core.refresh import HR_LEN, HR_START

# gathered straight (int64, fixed-size binary), concatenated then taken (a string, an int64 with NULLs)
LAYOUT = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("b", pa.binary(3)), ("s", pa.string()), ("n", pa.int64())])
COLS = ("k", "v", "b", "s", "n")


def rows_of(keys: list[int], src: list[int], tag: int) -> pa.Table:
    """Rows with a unique ``v`` (to check order), its bytes, and nullable columns."""
    n = len(keys)
    v = np.arange(n, dtype=np.int64) + tag * 1_000_000
    s = [None if i % 5 == 0 else f"r{tag}-{i}" for i in range(n)]
    nn = [None if i % 3 == 0 else i * tag for i in range(n)]
    cols = {
        "k": pa.array(keys, pa.int64()),
        "v": v,
        "b": pa.array([int(x % (1 << 24)).to_bytes(3, "little") for x in v], pa.binary(3)),
        "s": pa.array(s, pa.string()),
        "n": pa.array(nn, pa.int64()),
    }
    return pa.table(cols, schema=LAYOUT)


def reference(
    old: pa.Table, old_src: np.ndarray, drop: set[int], drop_src: int, add: pa.Table, add_src: np.ndarray
) -> tuple[list[tuple[Any, ...]], list[int]]:
    ok = [k not in drop and s != drop_src for k, s in zip(old.column("k").to_pylist(), old_src, strict=True)]
    both = pa.concat_tables([old.filter(pa.array(ok, pa.bool_())), add])
    src = np.concatenate([old_src[np.array(ok, bool)], add_src]).astype(np.int64)
    keys = np.asarray(both.column("k").to_numpy())
    order = np.lexsort((src, keys))  # stable
    t = both.take(pa.array(order))
    return list(zip(*[t.column(c).to_pylist() for c in COLS], strict=True)), src[order].tolist()


def state(cache: Cache) -> tuple[list[tuple[Any, ...]], list[int]]:
    t = cache.table()
    return list(zip(*[t.column(c).to_pylist() for c in COLS], strict=True)), cache.src.tolist()


def by_value(rows_src: tuple[list[tuple[Any, ...]], list[int]]) -> dict[Any, list[tuple[Any, ...]]]:
    """Each value's (row, tag) pairs in row order: runs compared whatever order they come in."""
    out: dict[Any, list[tuple[Any, ...]]] = {}
    for row, tag in zip(*rows_src, strict=True):
        out.setdefault(row[0], []).append((row, tag))
    return out


def check_runs(cache: Cache) -> None:
    """Every cached value's run is exactly its rows, and the runs cover all rows."""
    ix = cache.index
    keys = cache.table().column("k").to_numpy()
    covered = 0
    for j in np.flatnonzero(ix.used):
        st_, ln = ix.payload[j, HR_START], ix.payload[j, HR_LEN]
        assert ln > 0 and (keys[st_ : st_ + ln] == ix.keys[j]).all()
        covered += ln
    assert covered == cache.rows
    assert ix.size == len(np.unique(keys))


rows_st = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 3)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(
    first=rows_st,
    second=rows_st,
    drop=st.sets(st.integers(0, 12), max_size=4),
    drop_src=st.sampled_from([None, 0, 2]),
    third=rows_st,
)
def test_rebuild_matches_a_stable_sort_of_every_row(
    first: list[tuple[int, int]],
    second: list[tuple[int, int]],
    drop: set[int],
    drop_src: int | None,
    third: list[tuple[int, int]],
) -> None:
    cache = Cache(LAYOUT, "int")
    cache.set_partitions(4)
    # partitions are read in order, so a run's rows come by partition (as s_B collects them)
    first = sorted(first, key=lambda r: r[1])
    a = rows_of([k for k, _ in first], [s for _, s in first], 1)
    a_src = np.array([s for _, s in first], np.int32)
    cache.rebuild(np.zeros(0, np.int64), a, a.column("k").to_numpy(), a_src, 1)
    want = reference(rows_of([], [], 0), np.zeros(0, np.int32), set(), -1, a, a_src)
    assert by_value(state(cache)) == by_value(want)
    check_runs(cache)

    old, old_src = cache.table(), cache.src.copy()
    b = rows_of([k for k, _ in second], [s for _, s in second], 2)
    b_src = np.array([s for _, s in second], np.int32)
    dropped = np.array(sorted(drop), np.int64)
    cache.rebuild(dropped, b, b.column("k").to_numpy(), b_src, 2, keep_src_not=drop_src)
    want = reference(old, old_src, drop, -1 if drop_src is None else drop_src, b, b_src)
    assert by_value(state(cache)) == by_value(want)
    check_runs(cache)
    assert np.array_equal(cache.cnt_src, np.bincount(cache.src, minlength=4))
    # values new in this rebuild start their hit count now; values that stayed keep theirs
    ix = cache.index
    since = {int(ix.keys[j]): int(ix.payload[j, HR_SINCE]) for j in np.flatnonzero(ix.used)}
    assert since == {k: 1 if k in {r[0] for r in first} else 2 for k in since}
    assert cache.last_transient > 0 or not (first or second)

    # then a merge (a refresh of partition 3) over runs that may no longer be in value order
    old, old_src = cache.table(), cache.src.copy()
    third = sorted(third, key=lambda r: r[1])
    c = rows_of([k for k, _ in third], [3] * len(third), 3)
    c_src = np.full(len(third), 3, np.int32)
    cache.rebuild(np.zeros(0, np.int64), c, c.column("k").to_numpy(), c_src, 3, keep_src_not=3)
    want = reference(old, old_src, set(), 3, c, c_src)
    assert state(cache) == want  # a merge leaves every row in value order again
    check_runs(cache)


def test_rebuild_temporaries_are_a_few_bytes_a_row() -> None:
    """Dropping one value of 200k rows: the order and tags (8 B a row), one column twice; no per-row keys or sort."""
    n = 200_000
    keys = np.repeat(np.arange(n // 4, dtype=np.int64), 4)
    t = rows_of(keys.tolist(), [0] * n, 1)
    cache = Cache(LAYOUT, "int")
    cache.rebuild(np.zeros(0, np.int64), t, keys, np.zeros(n, np.int32), 1)
    cache.last_transient = 0  # (the operator resets it after each step: it is the most of a step's rebuilds)
    cache.rebuild(np.array([7], np.int64), None, np.zeros(0, np.int64), np.zeros(0, np.int32), 2)
    assert cache.rows == n - 4
    widest = max(c.nbytes for c in cache.columns)
    # order + tags + marks (12 B a row), runs (16 B a value), the new column beside the old
    assert cache.last_transient <= n * 12 + (n // 4) * 20 + widest + 4096


def test_switch_in_or_eviction_alone_holds_less_than_the_merge() -> None:
    """Appending new values' rows, or dropping values, leaves the old rows in place: less than merging every row."""
    n = 200_000
    keys = np.repeat(np.arange(n // 4, dtype=np.int64), 4)
    t = rows_of(keys.tolist(), [0] * n, 1)
    add_keys = np.repeat(np.arange(n // 4, n // 4 + 250, dtype=np.int64), 4)
    add = rows_of(add_keys.tolist(), [1] * len(add_keys), 2)
    held = {}
    for how, beside in (("alone", 0), ("merge", 1)):  # (bytes beside a rebuild make it merge)
        cache = Cache(LAYOUT, "int")
        cache.rebuild(np.zeros(0, np.int64), t, keys, np.zeros(n, np.int32), 1)
        cache.last_transient = 0
        cache.rebuild(np.zeros(0, np.int64), add, add_keys, np.ones(len(add_keys), np.int32), 2, beside=beside)
        check_runs(cache)
        grow = cache.last_transient
        cache.last_transient = 0
        cache.rebuild(
            np.arange(0, n // 4, 10, dtype=np.int64),
            None,
            np.zeros(0, np.int64),
            np.zeros(0, np.int32),
            3,
            beside=beside,
        )
        check_runs(cache)
        held[how] = (grow, cache.last_transient)
        assert cache.rows == n + len(add_keys) - 4 * (n // 40)
    assert held["alone"][0] < 0.75 * held["merge"][0], held
    assert held["alone"][1] < held["merge"][1], held
