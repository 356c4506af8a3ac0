"""The bottom layer's shared shapes: master scans, sinks, output columns, dead letters, counters.

Everything here is imported from above (the operator, the adapters, the pipeline, the
warehouse model); it imports nothing of ssbj and needs only pyarrow, so every layer can
use it without Spark, a database or Kafka.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from ssbj.errors import ConfigError

# Columns every warehouse sink adds to each row: the Spark batch id that produced it and
# the segment inside that batch (0: the batch's own steps; 1, 2, ...: steps run after it
# while the stream was idle or draining).  (batch id, segment) is the unit of replacement.
BATCH_ID_COLUMN = "ssbj_batch_id"
SEGMENT_COLUMN = "ssbj_segment"

# With the join sharded in executors, every shard writes its own rows of a batch: the
# segment column then holds segment * MAX_SHARDS + shard, so (batch id, segment, shard) is
# the unit of replacement and one shard's retry never touches another shard's rows.
MAX_SHARDS = 1024


def shard_segment(segment: int, shard: int) -> int:
    """Return the segment column's value for ``segment`` of ``shard`` (placement: executors)."""
    if not 0 <= shard < MAX_SHARDS:
        raise ValueError(f"shard must be in 0..{MAX_SHARDS - 1}, got {shard}")
    return segment * MAX_SHARDS + shard


DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("reason", pa.string()),
        pa.field("position", pa.string()),
        pa.field("file", pa.string()),
        pa.field("line", pa.int64()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("payload", pa.binary()),
    ]
)
"""One row per malformed record: why, where (``file:line`` or ``topic/partition/offset``), raw bytes."""


@dataclass(frozen=True)
class TableName:
    """A database table, ``table`` or ``schema.table``: the one way table names are split and joined."""

    name: str
    schema: str | None = None

    @classmethod
    def parse(cls, text: str) -> TableName:
        """Split ``"schema.table"`` or ``"table"``; raise ConfigError for anything else."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"table name must be a non-empty string, got {text!r}")
        parts = text.split(".")
        if len(parts) > 2 or any(not p or "\x00" in p for p in parts):
            raise ConfigError(f"table name must be 'table' or 'schema.table', got {text!r}")
        return cls(parts[1], parts[0]) if len(parts) == 2 else cls(parts[0])

    @property
    def parts(self) -> tuple[str, ...]:
        """(schema, table) or (table,)."""
        return (self.schema, self.name) if self.schema else (self.name,)

    def __str__(self) -> str:
        return ".".join(self.parts)


@runtime_checkable
class MasterScan(Protocol):
    """Partition ``p`` of R, ``partition_rows`` (b) tuples each, k partitions per R-cycle."""

    @property
    def partition_rows(self) -> int:
        """B: master tuples per partition (disk-buffer size)."""
        ...

    @property
    def num_rows(self) -> int:
        """R_t: master tuples in R."""
        ...

    def num_partitions(self) -> int:
        """K: partitions in one R-cycle (read at the start of every R-cycle)."""
        ...

    def read_partition(self, p: int) -> pa.Table:
        """Load partition ``p`` (0 <= p < k) into the disk buffer."""
        ...

    def repartition(self, partition_rows: int) -> MasterScan:
        """Return the same R, scanned in partitions of ``partition_rows`` tuples."""
        ...


@runtime_checkable
class MasterChunks(Protocol):
    """A master scan that hands a partition out in pieces, reading each only when asked.

    Optional: with it the operator holds one piece of the partition at a time (the disk
    buffer costs ``rows`` rows, not b); a scan without it is read whole and charged whole.
    The pieces, concatenated, are exactly :meth:`MasterScan.read_partition` of ``p``.
    """

    def read_partition_chunks(self, p: int, rows: int) -> Iterator[pa.Table]:
        """Partition ``p`` in consecutive pieces of at most ``rows`` rows."""
        ...


@runtime_checkable
class MasterResident(Protocol):
    """A master scan whose partitions are already in memory (an Arrow table), so reading one copies nothing.

    Optional, beside :class:`MasterChunks`: the disk phase then probes a view of the
    partition in one compiled pass instead of asking for pieces one by one (a piece of a
    resident partition is a view too: there is nothing to hold or to read). It still
    charges the disk buffer one piece, what a streaming read of the same R would hold.
    """

    def resident_partition(self, p: int) -> pa.Table:
        """Partition ``p`` as a zero-copy view of rows the scan already holds."""
        ...


@runtime_checkable
class MasterKeyUnique(Protocol):
    """A master scan that can vouch for its key: at most one row per key value.

    Optional. ``True`` only when the source itself guarantees it for as long as it is
    scanned (a primary key or a UNIQUE constraint on exactly that column, or rows held in
    memory and checked). SSBJ then knows ``m <= 1`` without counting it and decides the
    cache inequality at a value's row in any R-cycle (:mod:`ssbj.core.switching`). A wrong
    ``True`` breaks exactness, so it must never be a guess.
    """

    def key_unique(self, column: str) -> bool:
        """Whether ``column`` holds every non-NULL value at most once."""
        ...


PARTITION_COLUMN = "__ssbj_partition"
"""Column a :class:`MasterLookup` adds to each row: the index of the scan partition holding it."""


@runtime_checkable
class MasterLookup(Protocol):
    """Indexed access to the rows of a master scan by join key (the hybrid step's lookup path).

    Optional: a scan that also implements this lets the operator finish waiting stream
    tuples by fetching their keys' rows instead of scanning the rest of R.
    """

    @property
    def lookup_batch(self) -> int:
        """Most keys sent per round trip (the cost model counts round trips with it)."""
        ...

    def lookup(self, key: str, values: pa.Array) -> pa.Table:
        """Every current row whose ``key`` is one of ``values`` (NULLs are never matched).

        The columns are those of :meth:`MasterScan.read_partition` plus
        :data:`PARTITION_COLUMN` (int32): the partition ``p`` whose read would return the
        row, so the operator can skip partitions a stream tuple has already met.
        """
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


class _ByName(Mapping[str, Any]):
    """Read-only access by field name (a Mapping), for JSON reports and code that selects counters by name."""

    def __getitem__(self, name: str) -> Any:
        if name not in self._names():
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def _names(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self))  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        """Return the counters as a JSON-ready dict."""
        return {n: getattr(self, n) for n in self._names()}


@dataclass(frozen=True)
class OperatorTotals(_ByName):
    """Run-level counters of the operator; ``tuples_in == matched + unmatched + waiting`` always holds."""

    tuples_in: int
    matched_source_rows: int
    unmatched_source_rows: int
    waiting: int
    null_keys: int
    served_by_cache: int
    served_by_disk: int
    output_rows: int
    steps: int
    r_cycles: int
    switched_in: int
    evicted: int
    busy_seconds: float
    service_rate: float
    cache_share: float
    served_by_lookup: int = 0  # finished by the hybrid step's lookup path


def unaccounted(records_in: int, matched: int, unmatched: int, waiting: int, dead_letters: int) -> int:
    """Return the records in that are neither matched, unmatched, waiting nor a dead letter (the one rule)."""
    return records_in - (matched + unmatched + waiting + dead_letters)


def reconciles(records_in: int, matched: int, unmatched: int, waiting: int, dead_letters: int) -> bool:
    """Return whether every record in is matched, unmatched, waiting or a dead letter (:func:`unaccounted` is 0)."""
    return unaccounted(records_in, matched, unmatched, waiting, dead_letters) == 0


@dataclass(frozen=True)
class RunCounts(_ByName):
    """What a job (or one run of it) counted, from the records read to the audit table."""

    records_in: int = 0
    matched_source_rows: int = 0
    unmatched_source_rows: int = 0
    waiting: int = 0
    dead_letters: int = 0
    output_rows: int = 0

    @property
    def reconciled(self) -> bool:
        """Whether the counts add up (:func:`reconciles`)."""
        return self.unaccounted == 0

    @property
    def unaccounted(self) -> int:
        """Records in that the other counts do not explain (:func:`unaccounted`; 0 when they reconcile)."""
        return unaccounted(
            self.records_in, self.matched_source_rows, self.unmatched_source_rows, self.waiting, self.dead_letters
        )

    def minus(self, before: RunCounts) -> RunCounts:
        """Return the counts since ``before``; ``waiting`` is a level, not a sum, so it is kept as is."""
        return RunCounts(
            records_in=self.records_in - before.records_in,
            matched_source_rows=self.matched_source_rows - before.matched_source_rows,
            unmatched_source_rows=self.unmatched_source_rows - before.unmatched_source_rows,
            waiting=self.waiting,
            dead_letters=self.dead_letters - before.dead_letters,
            output_rows=self.output_rows - before.output_rows,
        )
