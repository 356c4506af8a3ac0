"""Sharding the join by key: routers (join key -> shard) and a shard's share of an Arrow master.

Every router is a function of the *encoded* join key (:func:`ssbj.core.keys.encode_keys`),
so a stream key and a master key that the operator would join (an ``int32`` stream key and
an ``int64`` master key, equal strings) always land in the same shard, and each shard's
operator sees every master row its stream tuples can meet. NULL keys never match and go to
shard 0 (:data:`NULL_SHARD`). The routers differ in what a database can evaluate:

* :class:`HashRouter`: splitmix64 of the encoded key, modulo P; any key type; a master in
  a database has to be filtered after it is read (every shard reads all of R);
* :class:`ModRouter`: the encoded key modulo P (floor modulo), integer keys; pushed down as
  ``MOD(MOD(col, P) + P, P) = s`` (:mod:`ssbj.adapters.shard_sql`);
* :class:`RangeRouter`: P - 1 ascending bounds on the encoded key, integer keys; pushed
  down as ``col >= lo AND col < hi``, an index range scan on an indexed key.

No Spark, database or Kafka here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from ssbj.core.keys import EncodedKeys, encode_keys, key_family
from ssbj.core.master import ArrowMaster
from ssbj.errors import ConfigError

NULL_SHARD = 0
"""Shard of every NULL key (they never match, so any fixed shard is exact)."""

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(values: np.ndarray) -> np.ndarray:
    """Splitmix64 finaliser of int64 values, as uint64 (the same mix as ssbj.core.hashing, vectorised)."""
    z = np.asarray(values, dtype=np.int64).view(np.uint64).copy()
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= _M1
        z ^= z >> np.uint64(27)
        z *= _M2
        z ^= z >> np.uint64(31)
    return z


@runtime_checkable
class Router(Protocol):
    """Maps encoded join keys to shards 0..shards-1."""

    @property
    def shards(self) -> int:
        """P, the number of shards."""
        ...

    def check_family(self, family: str) -> None:
        """Raise ConfigError when keys of ``family`` cannot be routed this way."""
        ...

    def route_values(self, values: np.ndarray) -> np.ndarray:
        """Shard (int32) of each encoded, non-NULL key."""
        ...


def _check_shards(shards: int) -> int:
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ConfigError(f"shards must be an integer >= 1, got {shards!r}")
    return shards


@dataclass(frozen=True)
class HashRouter:
    """Shard = splitmix64(encoded key) mod P: balanced for any key distribution, any key type."""

    shards: int

    def __post_init__(self) -> None:
        _check_shards(self.shards)

    def check_family(self, family: str) -> None:
        """Every key family can be hashed."""

    def route_values(self, values: np.ndarray) -> np.ndarray:
        """Shard of each encoded key."""
        return (splitmix64(values) % np.uint64(self.shards)).astype(np.int32)


def _integer_only(router: str, family: str) -> None:
    if family != "integer":
        raise ConfigError(f"{router} routes integer keys only (a database evaluates it on the column), got {family}")


@dataclass(frozen=True)
class ModRouter:
    """Shard = key mod P (floor modulo: never negative); a database computes it from the column."""

    shards: int

    def __post_init__(self) -> None:
        _check_shards(self.shards)

    def check_family(self, family: str) -> None:
        """Integer keys only."""
        _integer_only("ModRouter", family)

    def route_values(self, values: np.ndarray) -> np.ndarray:
        """Shard of each key."""
        return np.mod(np.asarray(values, dtype=np.int64), self.shards).astype(np.int32)


@dataclass(frozen=True)
class RangeRouter:
    """Shard s holds keys in ``[bounds[s-1], bounds[s])``; the first has no lower, the last no upper bound."""

    bounds: tuple[int, ...]

    def __post_init__(self) -> None:
        b = list(self.bounds)
        if any(isinstance(x, bool) or not isinstance(x, int) for x in b):
            raise ConfigError(f"range bounds must be integers, got {self.bounds!r}")
        if any(x >= y for x, y in itertools.pairwise(b)):
            raise ConfigError(f"range bounds must be strictly ascending, got {self.bounds!r}")

    @property
    def shards(self) -> int:
        """P = bounds + 1."""
        return len(self.bounds) + 1

    def check_family(self, family: str) -> None:
        """Integer keys only."""
        _integer_only("RangeRouter", family)

    def route_values(self, values: np.ndarray) -> np.ndarray:
        """Shard of each key."""
        edges = np.asarray(self.bounds, dtype=np.int64)
        return np.searchsorted(edges, np.asarray(values, dtype=np.int64), side="right").astype(np.int32)

    @classmethod
    def even(cls, keys: np.ndarray, shards: int) -> RangeRouter:
        """Bounds at the quantiles of ``keys`` (e.g. the master keys): shards of about equal row counts."""
        _check_shards(shards)
        k = np.sort(np.asarray(keys, dtype=np.int64))
        if shards == 1 or len(k) == 0:
            return cls(())
        cut = k[(np.arange(1, shards) * len(k)) // shards]
        return cls(tuple(_ascending(cut)))


def _ascending(cut: np.ndarray) -> list[int]:
    """Strictly ascending bounds, moved up when quantiles coincide (few distinct keys)."""
    out: list[int] = []
    for x in (int(v) for v in cut):
        out.append(x if not out or x > out[-1] else out[-1] + 1)
    return out


def route(keys: EncodedKeys, router: Router) -> np.ndarray:
    """Shard (int32) of every row; NULL keys go to :data:`NULL_SHARD`."""
    out = np.full(len(keys.values), NULL_SHARD, dtype=np.int32)
    if len(keys.values):
        out[keys.valid] = router.route_values(keys.values[keys.valid])
    return out


def route_column(col: pa.Array | pa.ChunkedArray, family: str, router: Router) -> np.ndarray:
    """Shard of every value of a key column of ``family``."""
    router.check_family(family)
    return route(encode_keys(col, family), router)


def split(table: pa.Table, key: str, family: str, router: Router) -> list[pa.Table]:
    """``table``'s rows per shard (row order kept within each shard)."""
    shard = route_column(table.column(key), family, router)
    return [table.filter(pa.array(shard == s)) for s in range(router.shards)]


class ShardedArrowMaster:
    """A shard's share of an :class:`ArrowMaster`: only the rows whose key routes to ``shard``.

    R is read once, through the master-scan protocol, and filtered; the share is then
    scanned in partitions of ``partition_rows`` rows of its own (its K is about K/P for
    the same b), so the shard's disk buffer and R-cycle are sized by its share.
    """

    def __init__(
        self,
        master: ArrowMaster,
        key: str,
        shard: int,
        router: Router,
        partition_rows: int | None = None,
        family: str | None = None,
    ) -> None:
        if not 0 <= shard < router.shards:
            raise ConfigError(f"shard must be in 0..{router.shards - 1}, got {shard}")
        if key not in master.schema.names:
            raise ConfigError(f"master key column {key!r} not in master columns {master.schema.names}")
        self.shard = shard
        self.router = router
        self.key = key
        self.family = family or key_family(master.schema.field(key).type)
        parts = [master.read_partition(p) for p in range(master.num_partitions())]
        whole = pa.concat_tables(parts) if parts else master.schema.empty_table()
        mine = route_column(whole.column(key), self.family, router) == shard
        self._inner = ArrowMaster(whole.filter(pa.array(mine)), partition_rows or master.partition_rows)
        self._share = self._inner.table  # (one chunk per column: the filter keeps the parts' chunks)

    @property
    def share(self) -> pa.Table:
        """The shard's master rows."""
        return self._share

    @property
    def partition_rows(self) -> int:
        """B of the share."""
        return self._inner.partition_rows

    @property
    def num_rows(self) -> int:
        """Rows of the share."""
        return self._inner.num_rows

    @property
    def schema(self) -> pa.Schema:
        """Schema of R."""
        return self._inner.schema

    def num_partitions(self) -> int:
        """K of the share."""
        return self._inner.num_partitions()

    def read_partition(self, p: int) -> pa.Table:
        """Partition ``p`` of the share."""
        return self._inner.read_partition(p)

    def key_unique(self, column: str) -> bool:
        """Whether ``column`` is unique in the share (:class:`ssbj.contracts.MasterKeyUnique`)."""
        return self._inner.key_unique(column)

    def resident_partition(self, p: int) -> pa.Table:
        """Partition ``p`` of the share, a zero-copy view (:class:`ssbj.contracts.MasterResident`)."""
        return self._inner.resident_partition(p)

    def resident_keys(self, p: int, column: str, family: str) -> EncodedKeys:
        """Join keys of partition ``p`` of the share, encoded once (:meth:`ArrowMaster.resident_keys`)."""
        return self._inner.resident_keys(p, column, family)

    def read_partition_chunks(self, p: int, rows: int) -> Iterator[pa.Table]:
        """Partition ``p`` of the share in pieces of at most ``rows`` rows."""
        return self._inner.read_partition_chunks(p, rows)

    def repartition(self, partition_rows: int) -> ArrowMaster:
        """Return the share as a plain ArrowMaster of ``partition_rows`` rows per partition."""
        return ArrowMaster(self._share, partition_rows)
