"""Kafka source for Spark Structured Streaming, written as a PySpark Python data source.

Spark's own Kafka connector is a JVM jar; this module reads Kafka with confluent-kafka instead::

    from ssbj.adapters.kafka_source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
    df = (
        spark.readStream.format("ssbj_kafka")
        .option("kafka.bootstrap.servers", "broker:9092")
        .option("subscribe", "orders")
        .option("maxOffsetsPerTrigger", 100_000)
        .load()
    )

The rows have the columns of Spark's native ``kafka`` source (``key``, ``value``, ``topic``,
``partition``, ``offset``, ``timestamp``), so a pipeline can switch between the two.

Offsets are ``{"<partition>": next_offset}`` and live in Spark's checkpoint; a micro-batch reads
the half-open range ``[start, end)`` of every partition on the executors, so a restarted query
resumes exactly and a replayed batch reads the same rows. Nothing is committed to Kafka.

How the end of a partition is found (option ``endOffsets``):

``consume`` (default)
    The driver consumes forward from the batch's start offset (at most the batch's per-partition
    share of ``maxOffsetsPerTrigger``) and takes the last offset seen + 1, stopping at the
    partition-EOF event or after ``pollTimeoutMs`` without messages. This does not rely on the
    broker's high watermark, which some Kafka-compatible brokers report wrongly: Tansu answers
    ListOffsets(latest) with the base offset of the partition's last record batch + 1, so up to a
    whole batch would stay unread until more data arrived. Costs a second read of each batch on
    the driver.
``watermark``
    Trust the high watermark from ListOffsets. Fast (one request per partition); use it with
    Apache Kafka and other brokers that report it correctly.

``startingOffsets=latest`` and the target of ``Trigger.AvailableNow`` need the current end of every
partition without a start to scan from; in ``consume`` mode they scan from one below the reported
high watermark, which finds the true end whether the broker reports it correctly or too low.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from ssbj.adapters.kafka_options import (
    ARROW_SCHEMA,
    BATCH_ROWS,
    KAFKA_SCHEMA,
    POLL_SLICE_S,
    RANGES_SCHEMA,
    BrokerTrouble,
    KafkaSourceError,
    KafkaSourceOptions,
    kafka_module,
    parse_starting_json,
    with_broker_retries,
)
from ssbj.adapters.kafka_read import KafkaRange, read_range
from ssbj.errors import ConfigError

__all__ = [
    "ARROW_SCHEMA",
    "KAFKA_SCHEMA",
    "RANGES_SCHEMA",
    "KafkaDataSource",
    "KafkaRange",
    "KafkaSourceError",
    "KafkaSourceOptions",
    "KafkaStreamReader",
    "read_range",
]

log = logging.getLogger(__name__)

Offsets = dict[str, int]
T = TypeVar("T")


def _fair_shares(total: int, parts: list[int], rotate: int) -> dict[int, int]:
    """Split ``total`` over ``parts`` as evenly as possible; the remainder goes round-robin from ``rotate``."""
    n = len(parts)
    base, extra = divmod(total, n)
    return {p: base + (1 if (i - rotate) % n < extra else 0) for i, p in enumerate(parts)}


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches on the driver (offsets, end discovery) and reads ranges on executors."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self._consumer: Any = None
        self._errors: list[Any] = []
        self._target: dict[int, int] | None = None
        self._latest_seen: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_consumer=None, _errors=[])
        return state

    # -- Spark API ----------------------------------------------------------------------------
    def initialOffset(self) -> Offsets:
        """Resolve ``startingOffsets`` for every current partition."""
        spec = self.options.starting_offsets

        def attempt() -> Offsets:
            parts = self._partitions()
            if spec == "earliest":
                wanted = dict.fromkeys(parts, -2)
            elif spec == "latest":
                wanted = dict.fromkeys(parts, -1)
            else:
                given = parse_starting_json(spec, self.options.topic)
                wanted = {p: given.get(p, -2) for p in parts}
            latest_parts = [p for p, o in wanted.items() if o == -1]
            latest = self._latest(latest_parts) if latest_parts else {}
            out: Offsets = {}
            for p, o in wanted.items():
                out[str(p)] = latest[p] if o == -1 else (self._watermarks(p)[0] if o == -2 else o)
            return out

        offsets = self._retrying("initialOffset", attempt)
        log.info("ssbj_kafka: starting offsets %s (%s)", offsets, self.options.describe())
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)`` when that option is set."""
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return super().getDefaultReadLimit()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of every current partition as the target of an available-now run."""
        self._target = self._retrying("prepareForTriggerAvailableNow", lambda: self._latest(self._partitions()))
        log.info("ssbj_kafka: available-now target %s", self._target)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> Offsets:
        """End offsets of the next micro-batch: everything available, within ``limit`` and the target."""
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None

        def attempt() -> Offsets:
            begin = {int(p): int(o) for p, o in start.items()}
            for p in self._partitions():
                begin.setdefault(p, 0)  # a new partition starts at earliest
            ends = self._advance(begin, budget)
            return {str(p): ends[p] for p in sorted(ends)}

        end = self._retrying("latestOffset", attempt)
        self._latest_seen = end
        return end

    def reportLatestOffset(self) -> Offsets | None:
        """Return the newest end offsets this reader has seen (no extra broker round trip)."""
        return self._latest_seen

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[KafkaRange]:
        """One task per partition with offsets in ``[start, end)``."""
        ranges = []
        for p, e in sorted(end.items(), key=lambda kv: int(kv[0])):
            s = int(start.get(p, 0))
            if int(e) > s:
                ranges.append(KafkaRange(self.options.topic, int(p), s, int(e)))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Read one :class:`KafkaRange` (on an executor) as Arrow record batches (``emit=ranges``: the range)."""
        rng = cast(KafkaRange, partition)
        if self.options.emit == "ranges":
            return iter([(rng.topic, rng.partition, rng.start, rng.end)])
        return read_range(self.options, rng)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        """Close the driver's consumer."""
        self._close()

    # -- helpers ------------------------------------------------------------------------------
    def _driver_consumer(self) -> Any:
        if self._consumer is None:
            self._errors = []
            self._consumer = kafka_module().Consumer(self.options.client_config(self._errors))
        return self._consumer

    def _close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception:
                log.debug("closing consumer failed", exc_info=True)

    def _retrying(self, what: str, fn: Callable[[], T]) -> T:
        # a fresh client after a failure reconnects at once instead of after librdkafka's backoff
        return with_broker_retries(self.options, what, fn, self._close)

    def _partitions(self) -> list[int]:
        topic = self.options.topic
        md = self._driver_consumer().list_topics(topic, timeout=self.options.request_timeout_ms / 1000.0)
        meta = md.topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise BrokerTrouble(f"topic {topic!r} not available: {meta.error if meta is not None else 'missing'}")
        return sorted(meta.partitions)

    def _watermarks(self, partition: int) -> tuple[int, int]:
        tp = kafka_module().TopicPartition(self.options.topic, partition)
        low, high = self._driver_consumer().get_watermark_offsets(
            tp, timeout=self.options.request_timeout_ms / 1000.0, cached=False
        )
        return int(low), int(high)

    def _latest(self, parts: list[int]) -> dict[int, int]:
        """Find the current end of each partition (see the module docstring for the consume-mode scan)."""
        marks = {p: self._watermarks(p) for p in parts}
        if self.options.end_offsets == "watermark":
            return {p: high for p, (_low, high) in marks.items()}
        begin = {p: max(low, high - 1) for p, (low, high) in marks.items()}
        return self._scan(begin, dict.fromkeys(parts))

    def _advance(self, begin: dict[int, int], budget: int | None) -> dict[int, int]:
        """End offsets after ``begin`` within ``budget`` (split fairly) and the available-now target."""
        ends = dict(begin)
        ceiling = self._target
        active = [p for p in sorted(begin) if ceiling is None or ceiling.get(p, begin[p]) > begin[p]]
        remaining = budget
        rotate = sum(begin.values())  # so small budgets do not always favour low partitions
        while active and (remaining is None or remaining > 0):
            shares = _fair_shares(remaining, active, rotate) if remaining is not None else dict.fromkeys(active)
            caps: dict[int, int | None] = {}
            for p in active:
                room = None if ceiling is None else ceiling[p] - ends[p]
                share = shares[p]
                caps[p] = room if share is None else (share if room is None else min(share, room))
            new = self._step({p: ends[p] for p in active}, caps)
            # Partitions that used their whole share may have more; the others are exhausted.
            # Every round either spends budget or drops a partition, so the loop ends.
            full = [p for p in active if caps[p] is not None and new[p] - ends[p] == caps[p]]
            if remaining is None:
                ends.update(new)
                break
            remaining -= sum(new[p] - ends[p] for p in active)
            ends.update(new)
            active = [p for p in full if ceiling is None or ends[p] < ceiling[p]]
        return ends

    def _step(self, begin: dict[int, int], caps: dict[int, int | None]) -> dict[int, int]:
        """Advance each partition by at most its cap, as far as data exists."""
        if self.options.end_offsets == "watermark":
            out = {}
            for p, s in begin.items():
                high = max(s, self._watermarks(p)[1])
                cap = caps[p]
                out[p] = high if cap is None else min(high, s + cap)
            return out
        return self._scan(begin, caps)

    def _scan(self, begin: dict[int, int], caps: dict[int, int | None]) -> dict[int, int]:
        """Consume forward from ``begin``; per partition, return the offset after the last message seen.

        A partition stops at ``begin + cap``, at the end-of-partition event, or when nothing has
        arrived for ``pollTimeoutMs``. Gaps are fine: a message at offset >= begin + cap - 1 proves
        the range up to begin + cap is complete.
        """
        ck = kafka_module()
        eof_code = ck.KafkaError._PARTITION_EOF
        ends = dict(begin)
        limits = {p: (None if caps[p] is None else begin[p] + cast(int, caps[p])) for p in begin}
        open_ = {p for p in begin if limits[p] is None or cast(int, limits[p]) > begin[p]}
        if not open_:
            return ends
        consumer = self._driver_consumer()
        self._errors.clear()
        consumer.assign([ck.TopicPartition(self.options.topic, p, begin[p]) for p in sorted(open_)])
        poll_timeout = self.options.poll_timeout_ms / 1000.0
        idle_since = time.monotonic()
        paused: list[Any] = []
        try:
            while open_:
                want = (
                    sum(cast(int, limits[p]) - ends[p] for p in open_)
                    if all(limits[p] is not None for p in open_)
                    else 0
                )
                # ask for no more than can still arrive, or consume() waits out its timeout
                msgs = consumer.consume(
                    num_messages=min(BATCH_ROWS, want + len(open_)) if want else BATCH_ROWS, timeout=POLL_SLICE_S
                )
                if not msgs:
                    if time.monotonic() - idle_since >= poll_timeout:
                        break
                    continue
                idle_since = time.monotonic()
                for m in msgs:
                    p = m.partition()
                    if p not in open_:
                        continue
                    err = m.error()
                    if err is not None:
                        if err.code() != eof_code:
                            raise BrokerTrouble(f"partition {p}: {err}")
                        open_.discard(p)
                        continue
                    off, lim = m.offset(), limits[p]
                    if off < begin[p]:
                        continue
                    if lim is not None and off + 1 >= lim:
                        ends[p] = lim
                        open_.discard(p)
                        # stop fetching it and drop what was prefetched, or the scan wades through it
                        consumer.pause([ck.TopicPartition(self.options.topic, p)])
                        paused.append(ck.TopicPartition(self.options.topic, p))
                    else:
                        ends[p] = max(ends[p], off + 1)
        finally:
            if paused:
                consumer.resume(paused)  # pause state would otherwise outlive the assignment
            consumer.unassign()
        down = [e for e in self._errors if e.code() == ck.KafkaError._ALL_BROKERS_DOWN]
        if open_ and down:
            raise BrokerTrouble(str(down[-1]))
        return ends


class KafkaDataSource(DataSource):
    """Spark data source ``ssbj_kafka``: one Kafka topic as a stream (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        """Short name for ``spark.readStream.format(...)``."""
        return "ssbj_kafka"

    def schema(self) -> StructType:
        """Return the fixed schema: the columns of Spark's native kafka source (``emit=ranges``: the ranges')."""
        ranges = str(self.options.get("emit", "records")).strip().lower() == "ranges"
        return RANGES_SCHEMA if ranges else KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        """Streaming reader; options are validated here."""
        options = KafkaSourceOptions.from_options(self.options)
        fixed = RANGES_SCHEMA if options.emit == "ranges" else KAFKA_SCHEMA
        if [f.name for f in schema.fields] != fixed.fieldNames():
            raise ConfigError(f"ssbj_kafka has a fixed schema: {fixed.simpleString()}")
        return KafkaStreamReader(options)
