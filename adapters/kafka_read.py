"""Executor side of the ``ssbj_kafka`` source: one offset range of one partition, read as Arrow."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ssbj.adapters.kafka_options import (
    ARROW_SCHEMA,
    BATCH_ROWS,
    POLL_SLICE_S,
    KafkaSourceOptions,
    kafka_module,
    with_broker_retries,
)

log = logging.getLogger("ssbj.adapters.kafka_source")


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
        client = _CONSUMERS[key] = _Client(kafka_module().Consumer(opts.client_config(errors)), errors, set())
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
    ck = kafka_module()
    eof_code = ck.KafkaError._PARTITION_EOF
    no_ts = ck.TIMESTAMP_NOT_AVAILABLE
    client = with_broker_retries(
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
            msgs = consumer.consume(num_messages=min(BATCH_ROWS, end - pos), timeout=POLL_SLICE_S)
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
            if len(offsets) >= BATCH_ROWS:
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
