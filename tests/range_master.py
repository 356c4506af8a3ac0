"""R in memory as key ranges over a primary key, changed by the test between steps (the core tests' master).

Used by tests/core/test_complete_cache.py and test_cache_refresh.py.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa


class RangeMaster:
    """R as rows keyed by a primary key: partition p holds pk in [p*b, (p+1)*b), the last is open.

    The test changes ``rows`` between steps; with ``pieces`` the partitions stream in pieces;
    ``resident``: an in-memory store (``MasterResident``) that hands out the same table while
    a partition's rows stay the same, new buffers when they changed.
    """

    def __init__(
        self,
        rows: dict[int, tuple[int | None, str]],
        b: int,
        k: int,
        pieces: bool = False,
        resident: bool = False,
        fixed: bool = False,
    ) -> None:
        self.rows = rows
        self._b, self._k = b, k
        self._fixed = fixed  # "v" as a fixed-width column (its text's CRC): s_B is written in place
        self._held: dict[int, tuple[Any, pa.Table]] = {}
        if pieces:
            self.read_partition_chunks = self._chunks
        if resident:
            self.resident_partition = self.read_partition

    @property
    def partition_rows(self) -> int:
        return self._b

    @property
    def num_rows(self) -> int:
        return len(self.rows)

    def num_partitions(self) -> int:
        return self._k

    def _table(self, pks: list[int]) -> pa.Table:
        return pa.table(
            {
                "pk": pa.array(pks, pa.int64()),
                "key": pa.array([self.rows[p][0] for p in pks], pa.int64()),
                "v": pa.array([zlib.crc32(self.rows[p][1].encode()) for p in pks], pa.int64())
                if self._fixed
                else pa.array([self.rows[p][1] for p in pks], pa.string()),
            }
        )

    def table(self) -> pa.Table:
        return self._table(sorted(self.rows))

    def read_partition(self, p: int) -> pa.Table:
        lo, hi = p * self._b, ((p + 1) * self._b if p < self._k - 1 else 1 << 62)
        pks = [x for x in sorted(self.rows) if lo <= x < hi]
        state = tuple((x, self.rows[x]) for x in pks)
        if p not in self._held or self._held[p][0] != state:
            self._held[p] = (state, self._table(pks))
        return self._held[p][1]

    def _chunks(self, p: int, rows: int) -> Iterator[pa.Table]:
        t = self.read_partition(p)
        for i in range(0, max(t.num_rows, 1), rows):
            yield t.slice(i, rows)

    def repartition(self, partition_rows: int) -> RangeMaster:
        return RangeMaster(self.rows, partition_rows, self._k, fixed=self._fixed)
