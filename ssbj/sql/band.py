"""The event-time band predicate that joins a second stream within a window.

The one supported form (in the ON clause of an inner JOIN)::

    c.ts BETWEEN o.ts - INTERVAL '10' MINUTE AND o.ts + INTERVAL '5' MINUTE

Each bound is the other input's time column, optionally plus or minus a constant: an
``INTERVAL 'n' unit`` (unit MICROSECOND to DAY; no MONTH or YEAR, whose length varies)
for a TIMESTAMP column, a non-negative integer literal for an integer column. BETWEEN is
inclusive, as in SQL; a NULL time never matches. Other forms (``ABS(c.ts - o.ts) <= ...``,
two comparisons, expressions on the bounded column) are a :class:`ConfigError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pyarrow as pa

from ssbj.core.multiway.spec import TimeOffset
from ssbj.errors import ConfigError
from ssbj.sql._sqlglot import exp
from ssbj.sql.parse import line_of, where

Col = tuple[str, str]

FORM = "c.ts BETWEEN o.ts - INTERVAL 'n' MINUTE AND o.ts + INTERVAL 'n' MINUTE"
_UNITS = {
    "MICROSECOND": timedelta(microseconds=1),
    "MILLISECOND": timedelta(milliseconds=1),
    "SECOND": timedelta(seconds=1),
    "MINUTE": timedelta(minutes=1),
    "HOUR": timedelta(hours=1),
    "DAY": timedelta(days=1),
}


@dataclass(frozen=True)
class Band:
    """``time BETWEEN base - lower AND base + upper`` (columns of two inputs)."""

    time: Col
    base: Col
    lower: TimeOffset
    upper: TimeOffset
    line: int | None
    text: str

    @property
    def aliases(self) -> frozenset[str]:
        """The two inputs it connects."""
        return frozenset((self.time[0], self.base[0]))

    def bounding(self, alias: str) -> Band:
        """Return the same band with ``alias``'s column bounded: t in [b - l, b + u] iff b in [t - u, t + l]."""
        if self.time[0] == alias:
            return self
        return Band(self.base, self.time, self.upper, self.lower, self.line, self.text)


def _unwrap(node: Any) -> Any:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _offset(node: Any, is_time: bool, text: str, where_: str) -> TimeOffset:
    node = _unwrap(node)
    if is_time:
        if isinstance(node, exp.Interval):
            u = node.args.get("unit")
            unit = str(u.name if u is not None else "").upper().rstrip("S")
            value = _unwrap(node.this)
            if unit in _UNITS and isinstance(value, exp.Literal) and str(value.this).strip().isdigit():
                return int(str(value.this).strip()) * _UNITS[unit]
        raise ConfigError(
            f"{where_}window bound of a TIMESTAMP column must be INTERVAL 'n' <unit> (unit MICROSECOND to DAY): {text}"
        )
    if isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit():
        return int(str(node.this))
    raise ConfigError(f"{where_}window bound of an integer column must be a non-negative integer literal: {text}")


def _bound(node: Any, is_time: bool, text: str, where_: str) -> tuple[Any, TimeOffset]:
    """(column node, signed offset) of ``col``, ``col + k`` or ``col - k``."""
    node = _unwrap(node)
    zero: TimeOffset = timedelta(0) if is_time else 0
    if isinstance(node, exp.Column):
        return node, zero
    if isinstance(node, exp.Add | exp.Sub) and isinstance(_unwrap(node.this), exp.Column):
        off = _offset(node.expression, is_time, text, where_)
        return _unwrap(node.this), (-off if isinstance(node, exp.Sub) else off)
    raise ConfigError(f"{where_}window bound must be <column>, <column> + k or <column> - k: {text} (form: {FORM})")


def parse_band(pred: Any, resolve: Any, schema_of: Any) -> Band:
    """Return the band of a cross-input BETWEEN; ``resolve`` maps a column node to (alias, column)."""
    text = pred.sql(dialect="duckdb")
    w = where(pred)
    if not isinstance(pred, exp.Between) or not isinstance(_unwrap(pred.this), exp.Column):
        raise ConfigError(f"{w}window predicate must be {FORM}: {text}")
    time = resolve(_unwrap(pred.this))
    ttype = schema_of(time[0]).field(time[1]).type
    if not (pa.types.is_timestamp(ttype) or pa.types.is_integer(ttype)):
        raise ConfigError(f"{w}event-time column {time[0]}.{time[1]} must be a TIMESTAMP or an integer, not {ttype}")
    is_time = pa.types.is_timestamp(ttype)
    lo_col, lo = _bound(pred.args["low"], is_time, text, w)
    hi_col, hi = _bound(pred.args["high"], is_time, text, w)
    base, base_hi = resolve(lo_col), resolve(hi_col)
    if base != base_hi or base[0] == time[0]:
        raise ConfigError(f"{w}both window bounds must be offsets of one column of the other input: {text}")
    btype = schema_of(base[0]).field(base[1]).type
    if pa.types.is_timestamp(btype) != is_time or not (pa.types.is_timestamp(btype) or pa.types.is_integer(btype)):
        raise ConfigError(f"{w}window columns {time[1]} ({ttype}) and {base[1]} ({btype}) are not comparable times")
    return Band(time, base, -lo, hi, line_of(pred), text)  # type: ignore[operator]
