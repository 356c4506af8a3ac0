"""Contracts between the pipeline and its adapters (sources, master scans, sinks)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from ssbj.core.master import MasterScan

# Columns every warehouse sink adds to each row: the Spark batch id that produced it and
# the segment inside that batch (0: the batch's own steps; 1, 2, ...: steps run after it
# while the stream was idle or draining).  (batch id, segment) is the unit of replacement.
BATCH_ID_COLUMN = "ssbj_batch_id"
SEGMENT_COLUMN = "ssbj_segment"


@runtime_checkable
class WarehouseSink(Protocol):
    """A target written idempotently: writing (batch_id, segment) again replaces what it wrote."""

    def prepare(self, schema: pa.Schema) -> None:
        """Create the target for rows of ``schema`` if missing, or check that it fits."""
        ...

    def write(self, batch_id: int, segment: int, table: pa.Table) -> None:
        """Replace every row of (batch_id, segment) by ``table``, atomically.

        ``table`` has the schema given to :meth:`prepare`; the sink adds
        :data:`BATCH_ID_COLUMN` and :data:`SEGMENT_COLUMN`.  An empty table still
        deletes what an earlier attempt of the same (batch_id, segment) wrote.
        """
        ...

    def close(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class CheckpointedMasterScan(MasterScan, Protocol):
    """A master scan whose partitioning is part of the job's checkpoint."""

    @property
    def schema(self) -> pa.Schema:
        """Arrow schema of the projected master columns."""
        ...

    def layout(self) -> dict[str, Any]:
        """JSON-serialisable partitioning (saved once per job, restored on restart)."""
        ...
