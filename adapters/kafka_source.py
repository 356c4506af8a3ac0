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

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ssbj.errors import ConfigError, DependencyError, TransientError
from ssbj.retry import RetryPolicy, with_retries

__all__ = [
    "ARROW_SCHEMA",
    "KAFKA_SCHEMA",
    "RANGES_SCHEMA",
    "KafkaDataSource",
    "KafkaRange",
    "KafkaSourceError",
    "KafkaSourceOptions",
    "KafkaStreamReader",
]

log = logging.getLogger(__name__)
_RDKAFKA_LOG = logging.getLogger(__name__ + ".librdkafka")

KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
    ]
)
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
    ]
)

RANGES_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("start", LongType()),
        StructField("end", LongType()),
    ]
)
"""Rows of ``emit=ranges``: a micro-batch's offset ranges, one row per partition, for readers that fetch the
records themselves (:func:`read_range`, e.g. the shards of ``join.exchange: read``)."""

Offsets = dict[str, int]
T = TypeVar("T")

_SENSITIVE = ("password", "secret", "sasl", "token", "key")
_BATCH_ROWS = 10_000
_POLL_SLICE_S = 0.005


def _kafka() -> Any:
    """Import confluent_kafka (the only place this module does)."""
    try:
        import confluent_kafka
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise DependencyError("the ssbj_kafka source needs confluent-kafka: install ssbj[kafka]") from exc
    return confluent_kafka


class KafkaSourceError(TransientError):
    """The broker stayed unreachable, or a planned offset range could not be read."""


class _Transient(Exception):
    """A broker problem worth retrying."""


def _is_sensitive(name: str) -> bool:
    return any(marker in name.lower() for marker in _SENSITIVE)


def _int_option(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = options.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"option {name} must be >= {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Parsed options of the ``ssbj_kafka`` source (see :meth:`from_options` for the names)."""

    bootstrap_servers: str
    topic: str
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    end_offsets: str = "consume"
    poll_timeout_ms: int = 1000
    request_timeout_ms: int = 10_000
    retries: int = 5
    retry_backoff_ms: int = 200
    retry_backoff_max_ms: int = 10_000
    client_settings: tuple[tuple[str, str], ...] = ()
    emit: str = "records"

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSourceOptions:
        """Parse Spark reader options (keys are case-insensitive).

        ``kafka.bootstrap.servers`` and ``subscribe`` (one topic) are required. Optional:

        - ``startingOffsets``: ``earliest`` (default) | ``latest`` | ``{"topic": {"0": 5, "1": -2}}``
          with -2 earliest and -1 latest; unlisted partitions start at earliest.
        - ``maxOffsetsPerTrigger``: offsets per micro-batch, all partitions together, split evenly
          (a partition with less data leaves its share to the others).
        - ``endOffsets``: ``consume`` (default) | ``watermark``, see the module docstring.
        - ``pollTimeoutMs`` (1000): silence after which the driver's scan takes a partition as
          ended, and after which an executor read counts as a failed attempt.
        - ``requestTimeoutMs`` (10000): metadata and watermark requests.
        - ``retries`` (5), ``retryBackoffMs`` (200), ``retryBackoffMaxMs`` (10000): a failed
          broker call is retried up to ``retries`` times, waiting ``retryBackoffMs`` doubled each
          time up to ``retryBackoffMaxMs``, then :class:`KafkaSourceError` is raised.
        - ``emit``: ``records`` (default) | ``ranges``: one row per partition with the micro-batch's
          offset range ``[start, end)`` instead of its records (:data:`RANGES_SCHEMA`).
        - ``kafka.<name>``: passed to the confluent-kafka client as ``<name>`` (security
          settings, ``client.id``, fetch sizes...). Values of names containing password,
          secret, sasl, token or key are never logged.
        """
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
        if not bootstrap:
            raise ConfigError("option kafka.bootstrap.servers is required")
        topic = opts.get("subscribe", "").strip()
        if not topic or "," in topic:
            raise ConfigError("option subscribe must name exactly one topic")
        if "assign" in opts or "subscribepattern" in opts:
            raise ConfigError("only the subscribe option is supported (one topic)")
        starting = opts.get("startingoffsets", "earliest").strip()
        if starting not in ("earliest", "latest"):
            _parse_starting_json(starting, topic)  # validate early
        end_offsets = opts.get("endoffsets", "consume").strip().lower()
        if end_offsets not in ("consume", "watermark"):
            raise ConfigError(f"option endOffsets must be consume or watermark, got {end_offsets!r}")
        emit = opts.get("emit", "records").strip().lower()
        if emit not in ("records", "ranges"):
            raise ConfigError(f"option emit must be records or ranges, got {emit!r}")
        settings = tuple(
            sorted(
                (k[len("kafka.") :], v)
                for k, v in opts.items()
                if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
            )
        )
        return cls(
            bootstrap_servers=bootstrap,
            topic=topic,
            starting_offsets=starting,
            max_offsets_per_trigger=_int_option(opts, "maxOffsetsPerTrigger", None, 1),
            end_offsets=end_offsets,
            poll_timeout_ms=cast(int, _int_option(opts, "pollTimeoutMs", 1000, 1)),
            request_timeout_ms=cast(int, _int_option(opts, "requestTimeoutMs", 10_000, 1)),
            retries=cast(int, _int_option(opts, "retries", 5, 0)),
            retry_backoff_ms=cast(int, _int_option(opts, "retryBackoffMs", 200, 0)),
            retry_backoff_max_ms=cast(int, _int_option(opts, "retryBackoffMaxMs", 10_000, 0)),
            client_settings=settings,
            emit=emit,
        )

    def describe(self) -> str:
        """One line for logs, with the values of secret-looking client settings redacted."""
        settings = {k: ("***" if _is_sensitive(k) else v) for k, v in self.client_settings}
        return (
            f"topic={self.topic!r} bootstrap={self.bootstrap_servers} endOffsets={self.end_offsets} "
            f"maxOffsetsPerTrigger={self.max_offsets_per_trigger} client={settings}"
        )

    def client_config(self, errors: list[Any]) -> dict[str, Any]:
        """Config for an assign-only consumer; client errors are appended to ``errors``."""
        conf: dict[str, Any] = {
            "group.id": "ssbj-kafka-source",  # required by the client; never joined or committed
            "reconnect.backoff.max.ms": max(self.retry_backoff_max_ms, 10),
            "fetch.wait.max.ms": 10,  # consumers are only assigned while reading, so no idle polling
            # librdkafka pauses fetching for this long once its prefetch queue is full (default 1 s),
            # which stalls a reader that drains the queue quickly
            "fetch.queue.backoff.ms": 10,
            "log.connection.close": False,  # brokers close idle connections; not worth a log line
            "socket.timeout.ms": max(self.request_timeout_ms, 10),
        }
        conf.update(dict(self.client_settings))
        conf.update(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "error_cb": errors.append,
                "logger": _RDKAFKA_LOG,
            }
        )
        return conf

    def retry_policy(self) -> RetryPolicy:
        """Return the backoff of broker calls: ``retries`` retries, ``retryBackoffMs`` doubling up to its max."""
        initial = min(self.retry_backoff_ms, self.retry_backoff_max_ms) / 1000
        return RetryPolicy(self.retries + 1, initial, self.retry_backoff_max_ms / 1000)

    def give_up(self, what: str, attempts: int, last: object) -> KafkaSourceError:
        """Build the error raised once retries are exhausted."""
        return KafkaSourceError(
            f"ssbj_kafka: {what} failed for topic {self.topic!r} on broker {self.bootstrap_servers} "
            f"after {attempts} attempts: {last}"
        )


def _parse_starting_json(text: str, topic: str) -> dict[int, int]:
    try:
        spec = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigError("option startingOffsets must be earliest, latest or a JSON object") from None
    if not isinstance(spec, dict) or set(spec) != {topic} or not isinstance(spec[topic], dict):
        raise ConfigError(f'option startingOffsets JSON must look like {{"{topic}": {{"0": 5, "1": -2}}}}')
    try:
        out = {int(p): int(o) for p, o in spec[topic].items()}
    except (TypeError, ValueError):
        raise ConfigError("option startingOffsets: partitions and offsets must be integers") from None
    if any(o < -2 for o in out.values()):
        raise ConfigError("option startingOffsets: offsets must be >= 0, or -2 (earliest) / -1 (latest)")
    return out


def _is_config_error(exc: BaseException) -> bool:
    """Whether a client exception is a bad setting (retrying cannot help)."""
    ck = _kafka()
    err = exc.args[0] if exc.args else None
    return isinstance(err, ck.KafkaError) and err.code() == ck.KafkaError._INVALID_ARG


def _fair_shares(total: int, parts: list[int], rotate: int) -> dict[int, int]:
    """Split ``total`` over ``parts`` as evenly as possible; the remainder goes round-robin from ``rotate``."""
    n = len(parts)
    base, extra = divmod(total, n)
    return {p: base + (1 if (i - rotate) % n < extra else 0) for i, p in enumerate(parts)}


class KafkaRange(InputPartition):
    """Offsets ``[start, end)`` of one topic partition: one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaRange({self.topic}[{self.partition}] {self.start}..{self.end})"


def _with_retries(opts: KafkaSourceOptions, what: str, fn: Callable[[], T], on_failure: Callable[[], None]) -> T:
    """Run ``fn``; on broker trouble call ``on_failure``, back off exponentially and retry.

    After ``retries`` retries, raise :class:`KafkaSourceError` naming the broker and topic.
    """

    def transient(exc: Exception) -> bool:
        return isinstance(exc, _Transient | _kafka().KafkaException) and not _is_config_error(exc)

    return with_retries(
        fn,
        opts.retry_policy(),
        transient,
        f"ssbj_kafka: {what} for topic {opts.topic!r} on broker {opts.bootstrap_servers}",
        log,
        on_failure=on_failure,
        give_up=lambda attempts, exc: opts.give_up(what, attempts, exc),
    )


# --- executor side ------------------------------------------------------------------------------


@dataclass
class _Client:
    consumer: Any
    errors: list[Any]
    topics: set[str]


_CONSUMERS: dict[tuple[tuple[str, str], ...], _Client] = {}


def _cached_consumer(opts: KafkaSourceOptions, topic: str) -> _Client:
    """One consumer per client config per Python worker (workers are reused between tasks)."""
    key = (("bootstrap", opts.bootstrap_servers), *opts.client_settings)
    client = _CONSUMERS.get(key)
    if client is None:
        errors: list[Any] = []
        client = _CONSUMERS[key] = _Client(_kafka().Consumer(opts.client_config(errors)), errors, set())
    if topic not in client.topics:
        # Without an explicit metadata request librdkafka learns the leader of a newly assigned
        # topic only on its 1 s refresh timer.
        client.consumer.list_topics(topic, timeout=opts.request_timeout_ms / 1000)
        client.topics.add(topic)
    return client


def _drop_consumer(opts: KafkaSourceOptions) -> None:
    key = (("bootstrap", opts.bootstrap_servers), *opts.client_settings)
    entry = _CONSUMERS.pop(key, None)
    if entry is not None:
        try:
            entry.consumer.close()
        except Exception:  # a broken consumer may refuse to close cleanly
            log.debug("closing consumer failed", exc_info=True)


def _to_batch(topic: str, partition: int, keys: list[Any], values: list[Any], offsets: list[int], ts: list[Any]) -> Any:
    n = len(offsets)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(offsets, pa.int64()),
            pa.array(ts, pa.timestamp("us", tz="UTC")),
        ],
        schema=ARROW_SCHEMA,
    )


def read_range(opts: KafkaSourceOptions, rng: KafkaRange) -> Iterator[Any]:
    """Yield the records of ``rng`` as Arrow record batches in offset order.

    Offsets may skip (compaction, transaction markers): the range is done at the first message
    with offset >= end - 1, or when the broker reports end of partition at an offset >= end.
    If nothing arrives for ``pollTimeoutMs`` before that, the broker counts as unreachable:
    retried with backoff, then :class:`KafkaSourceError`.
    """
    if rng.end <= rng.start:
        return
    ck = _kafka()
    eof_code = ck.KafkaError._PARTITION_EOF
    no_ts = ck.TIMESTAMP_NOT_AVAILABLE
    client = _with_retries(
        opts, f"connecting to read {rng}", lambda: _cached_consumer(opts, rng.topic), lambda: _drop_consumer(opts)
    )
    consumer, errors = client.consumer, client.errors
    errors.clear()
    consumer.assign([ck.TopicPartition(rng.topic, rng.partition, rng.start)])
    keys: list[Any] = []
    values: list[Any] = []
    offsets: list[int] = []
    stamps: list[Any] = []
    pos, end = rng.start, rng.end
    attempt, idle_since = 0, time.monotonic()
    poll_timeout = opts.poll_timeout_ms / 1000.0
    done = False
    try:
        while not done:
            msgs = consumer.consume(num_messages=min(_BATCH_ROWS, end - pos), timeout=_POLL_SLICE_S)
            progressed = False
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == eof_code and m.offset() >= end:
                        done = True  # nothing at or after end: the tail of the range was a gap
                        break
                    if err.code() != eof_code:
                        errors.append(err)
                    continue
                off = m.offset()
                if off < pos:
                    continue
                if off >= end:
                    done = True
                    break
                kind, ms = m.timestamp()
                keys.append(m.key())
                values.append(m.value())
                offsets.append(off)
                stamps.append(None if kind == no_ts else ms * 1000)
                pos = off + 1
                progressed = True
                if pos >= end:
                    done = True
                    break
            if len(offsets) >= _BATCH_ROWS:
                yield _to_batch(rng.topic, rng.partition, keys, values, offsets, stamps)
                keys, values, offsets, stamps = [], [], [], []
            if progressed:
                attempt, idle_since = 0, time.monotonic()
            elif not done and time.monotonic() - idle_since >= poll_timeout:
                attempt += 1
                last = errors[-1] if errors else f"no records for {opts.poll_timeout_ms} ms"
                if attempt > opts.retries:
                    raise opts.give_up(f"reading {rng}", attempt, last)
                delay = opts.retry_policy().delay(attempt)
                log.warning(
                    "ssbj_kafka: reading %s from %s stalled at offset %d (attempt %d of %d): %s; retrying in %.2fs",
                    rng,
                    opts.bootstrap_servers,
                    pos,
                    attempt,
                    opts.retries + 1,
                    last,
                    delay,
                )
                time.sleep(delay)
                idle_since = time.monotonic()
        if offsets:
            yield _to_batch(rng.topic, rng.partition, keys, values, offsets, stamps)
    except BaseException:
        _drop_consumer(opts)
        raise
    else:
        consumer.unassign()


# --- driver side --------------------------------------------------------------------------------


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
                given = _parse_starting_json(spec, self.options.topic)
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
            self._consumer = _kafka().Consumer(self.options.client_config(self._errors))
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
        return _with_retries(self.options, what, fn, self._close)

    def _partitions(self) -> list[int]:
        topic = self.options.topic
        md = self._driver_consumer().list_topics(topic, timeout=self.options.request_timeout_ms / 1000.0)
        meta = md.topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise _Transient(f"topic {topic!r} not available: {meta.error if meta is not None else 'missing'}")
        return sorted(meta.partitions)

    def _watermarks(self, partition: int) -> tuple[int, int]:
        tp = _kafka().TopicPartition(self.options.topic, partition)
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
        ck = _kafka()
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
                    num_messages=min(_BATCH_ROWS, want + len(open_)) if want else _BATCH_ROWS, timeout=_POLL_SLICE_S
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
                            raise _Transient(f"partition {p}: {err}")
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
            raise _Transient(str(down[-1]))
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
