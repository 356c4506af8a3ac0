"""Test data that exercises the SQL adapters' type and escaping paths (tests and bench/)."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa

TRICKY = [
    "plain",
    "tab\there",
    "new\nline",
    "back\\slash",
    "\\N",
    "",
    None,
    "quote ' \" ",
    "ünïcödé ✓",
    "cr\r",
    "nul\x00",
]


def mixed_types_table(n: int) -> pa.Table:
    """Return ``n`` rows of 8 columns: escaped and non-ASCII strings, NULLs, decimals, timestamps, dates."""
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "s": pa.array([TRICKY[i % len(TRICKY)] for i in range(n)], pa.string()),
            "f": pa.array([None if i % 7 == 0 else i / 3 for i in range(n)], pa.float64()),
            "d": pa.array([decimal.Decimal(i) / 100 for i in range(n)], pa.decimal128(12, 2)),
            "ts": pa.array([dt.datetime(2026, 1, 1, 10, 0, i % 60, 123456) for i in range(n)], pa.timestamp("us")),
            "day": pa.array([dt.date(2026, 1, 1 + i % 28) for i in range(n)], pa.date32()),
            "b": pa.array([None if i % 5 == 0 else i % 2 == 0 for i in range(n)], pa.bool_()),
            "i8": pa.array([i % 100 - 50 for i in range(n)], pa.int8()),
        }
    )
