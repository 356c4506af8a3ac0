"""One operator joining a stream with several master tables (UMJoin-style multi-way node).

:func:`run_query` is the entry point of ``ssbj query``: it replays stream batches through
a :class:`MultiWayJoin` and yields the result rows, columns named as ``spec.output``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from ssbj.core.multiway.operator import MultiWayJoin
from ssbj.core.multiway.order import POLICIES
from ssbj.core.multiway.spec import JoinEdge, MasterInput, MultiWaySpec, OutputColumn, StreamWindow
from ssbj.core.multiway.store import MemoryStore, WaitingStateOverflow, WaitingStore

__all__ = [
    "POLICIES",
    "JoinEdge",
    "MasterInput",
    "MemoryStore",
    "MultiWayJoin",
    "MultiWaySpec",
    "OutputColumn",
    "StreamWindow",
    "WaitingStateOverflow",
    "WaitingStore",
    "run_query",
]


def run_query(
    spec: MultiWaySpec,
    stream_batches: Iterable[pa.Table | tuple[str, pa.Table]],
    masters: Mapping[str, pa.Table],
    memory_budget: int,
    stats: dict[str, Any] | None = None,
    **options: Any,
) -> Iterator[pa.Table]:
    """Join every stream batch (one step each) with the masters, then drain; yield non-empty results.

    ``stream_batches`` are tables of ``spec.stream``, or ``(stream alias, table)`` pairs (a
    window join's two streams, in arrival order). ``masters`` maps a master's table name (or
    alias) to its rows. ``options`` go to
    :class:`MultiWayJoin` (``order_policy``, ``store``, ``hold``, ``partition_rows``, ...).
    ``stats``, if given, is filled at the end with counters, memory and probe-order info.
    """
    op = MultiWayJoin(spec, masters, memory_budget, **options)
    try:
        for item in stream_batches:
            out = op.process(item[1], item[0]) if isinstance(item, tuple) else op.process(item)
            if out.num_rows:
                yield out
        for out in op.drain():
            if out.num_rows:
                yield out
    finally:
        if stats is not None:
            stats.update(op.stats())
