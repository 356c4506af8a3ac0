"""Routing by encoded join key, and a shard's share of an Arrow master."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from ssbj.core.keys import encode_keys
from ssbj.core.master import ArrowMaster
from ssbj.core.shards import (
    NULL_SHARD,
    HashRouter,
    ModRouter,
    RangeRouter,
    ShardedArrowMaster,
    route_column,
    split,
    splitmix64,
)
from ssbj.errors import ConfigError


def test_splitmix64_matches_known_values() -> None:
    # splitmix64 finaliser of 0 and 1 (reference values of the published algorithm's mix step)
    z = splitmix64(np.array([0, 1], dtype=np.int64))
    assert int(z[0]) == 0
    x = 1
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    assert int(z[1]) == x ^ (x >> 31)


def test_hash_router_is_stable_and_balanced() -> None:
    keys = np.arange(100_000, dtype=np.int64)
    a = HashRouter(4).route_values(keys)
    b = HashRouter(4).route_values(keys.copy())
    assert (a == b).all() and set(np.unique(a)) == {0, 1, 2, 3}
    counts = np.bincount(a, minlength=4)
    assert counts.min() > 0.95 * counts.max()  # sequential keys spread evenly


def test_equal_keys_of_different_widths_route_alike() -> None:
    r = HashRouter(3)
    s32 = route_column(pa.array([5, None, -7, 2**31 - 1], pa.int32()), "integer", r)
    s64 = route_column(pa.array([5, None, -7, 2**31 - 1], pa.int64()), "integer", r)
    assert (s32 == s64).all()
    assert s32[1] == NULL_SHARD


def test_string_keys_route_by_their_hash() -> None:
    col = pa.array(["a", "b", None, "a"], pa.string())
    s = route_column(col, "string", HashRouter(5))
    assert s[0] == s[3] and s[2] == NULL_SHARD
    enc = encode_keys(col, "string")
    assert s[1] == HashRouter(5).route_values(enc.values[1:2])[0]


def test_mod_router_is_floor_modulo() -> None:
    keys = np.array([-7, -1, 0, 1, 7, -(2**63), 2**63 - 1], dtype=np.int64)
    got = ModRouter(3).route_values(keys)
    assert got.tolist() == [int(k) % 3 for k in keys.tolist()]


def test_range_router_bounds() -> None:
    r = RangeRouter((10, 20))
    assert r.shards == 3
    assert r.route_values(np.array([-5, 9, 10, 19, 20, 99])).tolist() == [0, 0, 1, 1, 2, 2]
    even = RangeRouter.even(np.arange(1000), 4)
    assert np.bincount(even.route_values(np.arange(1000))).tolist() == [250, 250, 250, 250]
    few = RangeRouter.even(np.array([1, 1, 1, 1]), 3)  # coinciding quantiles still ascend
    assert list(few.bounds) == sorted(set(few.bounds)) and few.shards == 3


@pytest.mark.parametrize(
    "bad",
    [lambda: HashRouter(0), lambda: ModRouter(True), lambda: RangeRouter((3, 3)), lambda: RangeRouter((1.5,))],  # type: ignore[arg-type]
)
def test_bad_routers_are_refused(bad: object) -> None:
    with pytest.raises(ConfigError):
        bad()  # type: ignore[operator]


def test_mod_and_range_refuse_hashed_keys() -> None:
    with pytest.raises(ConfigError, match="integer keys only"):
        route_column(pa.array(["x"]), "string", ModRouter(2))


@pytest.mark.parametrize("router", [HashRouter(3), ModRouter(3), RangeRouter((4, 9))])
def test_shares_partition_the_master(router: object) -> None:
    keys = [None, 0, 1, 1, 5, 9, 9, 9, 14, -3, None, 22]
    master = pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array(range(len(keys)))})
    shares = [ShardedArrowMaster(ArrowMaster(master, 4), "k", s, router, 2) for s in range(3)]  # type: ignore[arg-type]
    seen = sorted(v for sh in shares for v in sh.share.column("v").to_pylist())
    assert seen == list(range(len(keys)))  # every row in exactly one share
    for s, sh in enumerate(shares):
        assert set(route_column(sh.share.column("k"), "integer", router).tolist()) <= {s}  # type: ignore[arg-type]
        parts = [sh.read_partition(p) for p in range(sh.num_partitions())]
        assert sum(p.num_rows for p in parts) == sh.num_rows
        assert all(p.num_rows <= 2 for p in parts)
    assert shares[NULL_SHARD].share.column("k").null_count == 2


def test_split_keeps_order_within_a_shard() -> None:
    t = pa.table({"k": pa.array([3, 1, 3, None, 1]), "i": pa.array([0, 1, 2, 3, 4])})
    parts = split(t, "k", "integer", ModRouter(2))
    assert parts[1].column("i").to_pylist() == [0, 1, 2, 4]
    assert parts[0].column("i").to_pylist() == [3]


def test_share_rejects_a_bad_shard() -> None:
    m = ArrowMaster(pa.table({"k": [1]}), 1)
    with pytest.raises(ConfigError):
        ShardedArrowMaster(m, "k", 2, HashRouter(2))
