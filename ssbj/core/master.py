"""R held in memory as an Arrow table; the :class:`MasterScan` protocol itself is in :mod:`ssbj.contracts`."""

from __future__ import annotations

import pyarrow as pa

from ssbj.contracts import MasterScan
from ssbj.core.arrowtypes import plain_table
from ssbj.errors import ConfigError

__all__ = ["ArrowMaster", "MasterScan"]


class ArrowMaster:
    """R held as an Arrow table (a Parquet/CSV file read once); partitions are zero-copy slices."""

    def __init__(self, table: pa.Table, partition_rows: int) -> None:
        if partition_rows < 1:
            raise ConfigError(f"partition_rows (b) must be >= 1, got {partition_rows}")
        self._table = plain_table(table)
        self._b = partition_rows

    @property
    def partition_rows(self) -> int:
        """B."""
        return self._b

    @property
    def num_rows(self) -> int:
        """R_t."""
        return int(self._table.num_rows)

    @property
    def schema(self) -> pa.Schema:
        """Schema of R."""
        return self._table.schema

    def num_partitions(self) -> int:
        """K = ceil(R_t / b), at least 1 so an empty R still has R-cycles."""
        return max(1, -(-int(self._table.num_rows) // self._b))

    def read_partition(self, p: int) -> pa.Table:
        """Slice ``p`` of R."""
        return self._table.slice(p * self._b, self._b)

    def repartition(self, partition_rows: int) -> ArrowMaster:
        """Return the same table with another b."""
        return ArrowMaster(self._table, partition_rows)
