"""One delegating base for master scans that wrap another scan (prefetching, observing).

A wrapper overrides what it changes (usually ``read_partition`` and ``repartition``) and
gets the rest of :class:`~ssbj.contracts.CheckpointedMasterScan` from the wrapped scan.
The :class:`~ssbj.contracts.MasterLookup` methods pass through exactly when the wrapped
scan has them: the hybrid step checks with ``isinstance``, so a wrapper must not claim a
lookup its scan cannot do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ssbj.contracts import MasterKeyUnique, MasterScan

__all__ = ["WrappedScan"]

_LOOKUPS = ("lookup", "lookup_batch")


class WrappedScan:
    """Delegates the scan protocol to ``self._scan``."""

    def __init__(self, scan: MasterScan) -> None:
        self._scan = scan

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes the wrapper lacks; never for "_scan" once set
        if name in _LOOKUPS and hasattr(self.__dict__.get("_scan"), name):
            value = getattr(self._scan, name)
            return self._wrap_lookup(value) if name == "lookup" else value
        raise AttributeError(name)

    def _wrap_lookup(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Return the wrapped scan's ``lookup`` as this wrapper serves it (as is by default)."""
        return fn

    @property
    def inner(self) -> MasterScan:
        """The wrapped scan."""
        return self._scan

    @property
    def partition_rows(self) -> int:
        """B."""
        return self._scan.partition_rows

    @property
    def num_rows(self) -> int:
        """R_t."""
        return self._scan.num_rows

    @property
    def schema(self) -> pa.Schema:
        """Schema of the projected master columns (checkpointed scans only)."""
        schema: pa.Schema = getattr(self._scan, "schema")  # noqa: B009  (absent on plain scans)
        return schema

    def key_unique(self, column: str) -> bool:
        """Return the wrapped scan's :class:`ssbj.contracts.MasterKeyUnique` answer (``False`` without one)."""
        return isinstance(self._scan, MasterKeyUnique) and self._scan.key_unique(column)

    def layout(self) -> dict[str, Any]:
        """Return the wrapped scan's layout (checkpointed scans only)."""
        layout: dict[str, Any] = getattr(self._scan, "layout")()  # noqa: B009
        return layout

    def num_partitions(self) -> int:
        """K of the wrapped scan."""
        return self._scan.num_partitions()

    def read_partition(self, p: int) -> pa.Table:
        """Read partition ``p`` of the wrapped scan."""
        return self._scan.read_partition(p)

    def close(self) -> None:
        """Close the wrapped scan if it can be closed."""
        close = getattr(self._scan, "close", None)
        if callable(close):
            close()
