"""Options, errors, schemas and broker retries of the ``ssbj_kafka`` source.

Shared by the driver (:mod:`ssbj.adapters.kafka_source`) and the executors
(:mod:`ssbj.adapters.kafka_read`); :func:`kafka_module` is the one place confluent-kafka is
imported.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import pyarrow as pa
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

log = logging.getLogger("ssbj.adapters.kafka_source")
_RDKAFKA_LOG = logging.getLogger("ssbj.adapters.kafka_source.librdkafka")

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
records themselves (:func:`ssbj.adapters.kafka_read.read_range`, e.g. the shards of ``join.exchange: read``)."""

T = TypeVar("T")

_SENSITIVE = ("password", "secret", "sasl", "token", "key")
BATCH_ROWS = 10_000  # records per Arrow batch and per consume() call
POLL_SLICE_S = 0.005


def kafka_module() -> Any:
    """Import confluent_kafka (the only place the source does)."""
    try:
        import confluent_kafka
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise DependencyError("the ssbj_kafka source needs confluent-kafka: install ssbj[kafka]") from exc
    return confluent_kafka


class KafkaSourceError(TransientError):
    """The broker stayed unreachable, or a planned offset range could not be read."""


class BrokerTrouble(TransientError):
    """A broker problem worth retrying (raised inside :func:`with_broker_retries`)."""


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
            parse_starting_json(starting, topic)  # validate early
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


def parse_starting_json(text: str, topic: str) -> dict[int, int]:
    """Parse ``startingOffsets`` JSON (``{topic: {partition: offset}}``; -2 earliest, -1 latest)."""
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
    ck = kafka_module()
    err = exc.args[0] if exc.args else None
    return isinstance(err, ck.KafkaError) and err.code() == ck.KafkaError._INVALID_ARG


def with_broker_retries(opts: KafkaSourceOptions, what: str, fn: Callable[[], T], on_failure: Callable[[], None]) -> T:
    """Run ``fn``; on broker trouble call ``on_failure``, back off exponentially and retry.

    After ``retries`` retries, raise :class:`KafkaSourceError` naming the broker and topic.
    """

    def transient(exc: Exception) -> bool:
        return isinstance(exc, BrokerTrouble | kafka_module().KafkaException) and not _is_config_error(exc)

    return with_retries(
        fn,
        opts.retry_policy(),
        transient,
        f"ssbj_kafka: {what} for topic {opts.topic!r} on broker {opts.bootstrap_servers}",
        log,
        on_failure=on_failure,
        give_up=lambda attempts, exc: opts.give_up(what, attempts, exc),
    )
