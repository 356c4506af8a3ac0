"""A second stream joined within an event-time window, from SQL: the parsed window, the errors, the answer."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multiway_cases import multiset
from window_cases import WindowCase, duckdb_answer, run_window, window_case

from ssbj.cli import main
from ssbj.core.multiway import StreamWindow
from ssbj.errors import ConfigError
from ssbj.sql.compile import compile_sql

TS = pa.timestamp("us")
SCHEMAS = {
    "orders": pa.schema([("id", pa.int64()), ("user_id", pa.int64()), ("ts", TS), ("n", pa.int64())]),
    "clicks": pa.schema(
        [("id", pa.int64()), ("user_id", pa.int64()), ("ts", TS), ("n", pa.int64()), ("page", pa.int32())]
    ),
    "pages": pa.schema([("pid", pa.int32()), ("title", pa.string())]),
}
STREAMS = {"orders", "clicks"}
JOIN = (
    "SELECT o.id, c.id AS cid, p.title FROM orders o "
    "JOIN clicks c ON c.user_id = o.user_id AND {band} JOIN pages p ON p.pid = c.page"
)


def test_parsed_window() -> None:
    band = "c.ts BETWEEN o.ts - INTERVAL '10' MINUTE AND o.ts + INTERVAL 30 SECOND"
    spec = compile_sql(JOIN.format(band=band), SCHEMAS, STREAMS, lateness=5)
    assert spec.stream == "o" and spec.streams == ("o", "c")
    assert [m.alias for m in spec.masters] == ["p"]
    assert spec.edges[0].probe == "c"
    assert spec.window == StreamWindow(
        stream="c",
        columns=("user_id", "ts", "page", "id"),
        keys=("user_id",),
        probe_keys=("user_id",),
        time="ts",
        probe_time="ts",
        lower=timedelta(minutes=10),
        upper=timedelta(seconds=30),
        lateness=timedelta(seconds=5),
    )


def test_band_on_the_first_stream_is_turned_around() -> None:
    # o.ts in [c.ts - 2m, c.ts + 0]  <=>  c.ts in [o.ts - 0, o.ts + 2m]
    spec = compile_sql(JOIN.format(band="o.ts BETWEEN c.ts - INTERVAL '2' MINUTE AND c.ts"), SCHEMAS, STREAMS)
    assert spec.window is not None
    assert (spec.window.lower, spec.window.upper) == (timedelta(0), timedelta(minutes=2))


def test_integer_event_times() -> None:
    spec = compile_sql(JOIN.format(band="c.n BETWEEN o.n - 3 AND o.n + 4"), SCHEMAS, STREAMS, lateness=2)
    assert spec.window is not None
    assert (spec.window.lower, spec.window.upper, spec.window.lateness) == (3, 4, 2)


BAD = [
    (JOIN.format(band="ABS(c.n - o.n) <= 3"), "non-equi join predicate is not supported.*BETWEEN"),
    (JOIN.format(band="c.ts >= o.ts"), "non-equi join predicate is not supported"),
    (JOIN.format(band="c.ts BETWEEN o.ts - INTERVAL '1' MONTH AND o.ts"), "INTERVAL 'n' <unit>"),
    (JOIN.format(band="c.ts BETWEEN o.ts - 5 AND o.ts"), "INTERVAL 'n' <unit>"),
    (JOIN.format(band="c.n BETWEEN o.n - INTERVAL '1' SECOND AND o.n"), "non-negative integer literal"),
    (JOIN.format(band="c.ts BETWEEN o.ts AND o.ts + o.n"), "INTERVAL"),
    (JOIN.format(band="c.ts BETWEEN o.ts AND c.ts"), "one column of the other input"),
    (JOIN.format(band="c.ts BETWEEN o.n AND o.n"), "not comparable times"),
    (JOIN.format(band="c.id = o.id"), "exactly one band predicate"),
    (
        "SELECT o.id FROM orders o JOIN clicks c ON c.ts BETWEEN o.ts AND o.ts + INTERVAL '1' HOUR",
        "needs an equality c.x = o.y",
    ),
    (
        "SELECT o.id FROM orders o LEFT JOIN pages p ON p.pid = o.n "
        "LEFT JOIN clicks c ON c.user_id = o.user_id AND c.ts BETWEEN o.ts AND o.ts",
        "or by the first LEFT JOIN",
    ),
    (
        "SELECT o.id FROM orders o JOIN pages p ON p.pid = o.n "
        "LEFT JOIN clicks c ON c.user_id = o.user_id AND c.page = p.pid AND c.ts BETWEEN o.ts AND o.ts",
        "may only compare it with the stream 'o'",
    ),
    (
        "SELECT o.id FROM orders o JOIN clicks c ON c.user_id = o.user_id WHERE c.ts BETWEEN o.ts AND o.ts",
        "non-equi join predicate is not supported",
    ),
]


@pytest.mark.parametrize(("sql", "message"), BAD)
def test_unsupported_window_forms(sql: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        compile_sql(sql, SCHEMAS, STREAMS)


def test_window_needs_two_streams_and_at_most_two() -> None:
    with pytest.raises(ConfigError, match="only one is given"):
        compile_sql(JOIN.format(band="c.ts BETWEEN o.ts AND o.ts"), SCHEMAS, {"orders"})
    with pytest.raises(ConfigError, match="at most two streams"):
        compile_sql(JOIN.format(band="c.ts BETWEEN o.ts AND o.ts"), SCHEMAS, {"orders", "clicks", "pages"})
    with pytest.raises(ConfigError, match="lateness of an integer"):
        compile_sql(JOIN.format(band="c.n BETWEEN o.n AND o.n"), SCHEMAS, STREAMS, lateness=0.5)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    kinds=st.tuples(*[st.sampled_from(["inner", "left"])] * 2),
    window_kind=st.sampled_from(["inner", "left"]),
)
def test_compiled_window_query_equals_duckdb(seed: int, kinds: tuple[str, str], window_kind: str) -> None:
    case = window_case(seed, kinds, window_kind=window_kind)
    schemas = {a: pa.concat_tables([b for x, b in case.batches if x == a]).schema for a in "oc"}
    schemas.update({n: t.schema for n, t in case.masters.items()})
    spec = compile_sql(case.sql, schemas, {"o", "c"}, lateness=case.lateness)
    assert spec.window is not None and spec.window.kind == window_kind
    compiled = WindowCase(spec, case.sql, case.batches, case.masters, case.lateness)
    out, op = run_window(compiled, 1 << 24, {4}, partition_rows=2)
    assert multiset(out) == duckdb_answer(case)
    assert op.stats()["window_late"] == 0


def _files(case: WindowCase, tmp_path: Path) -> list[str]:
    """The case's SQL and inputs as files; the ``--sql``/``--stream``/``--master`` arguments."""
    args = ["--sql", str(tmp_path / "q.sql")]
    (tmp_path / "q.sql").write_text(case.sql)
    for a in "oc":
        pq.write_table(pa.concat_tables([b for x, b in case.batches if x == a]), tmp_path / f"{a}.parquet")
        args += ["--stream", f"{a}={tmp_path / f'{a}.parquet'}"]
    for name, t in case.masters.items():
        pq.write_table(t, tmp_path / f"{name}.parquet")
        args += ["--master", f"{name}={tmp_path / f'{name}.parquet'}"]
    return args


def test_cli_explain_shows_the_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = window_case(3, ("inner", "left"), n=20, window_kind="left")
    assert main(["explain", *_files(case, tmp_path)]) == 0
    assert "LEFT WINDOW stream c ON c.user_id = o.user_id AND c.ts BETWEEN o.ts - " in capsys.readouterr().out


def test_cli_query_replays_both_streams(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = window_case(3, ("inner", "left"), n=150, window_kind="left")
    args = ["query", *_files(case, tmp_path), "--memory", "16MB", "--batch-rows", "7"]
    out = tmp_path / "out.parquet"
    assert main([*args, "--lateness", str(case.lateness), "--out", str(out)]) == 0
    assert "0 late rows" in capsys.readouterr().out
    got = pq.read_table(out)
    assert Counter(tuple(r.values()) for r in got.to_pylist()) == duckdb_answer(case)
    assert got.num_rows > 0
