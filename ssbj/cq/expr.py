"""Scalar SQL expressions (a sqlglot AST) evaluated on Arrow arrays, with SQL's NULL logic.

The subset the continuous queries need: columns, literals, ``+ - * /`` (decimals stay
exact; ``/`` gives a double, as in DuckDB), comparisons, ``BETWEEN``, ``IN``, ``LIKE``,
``IS [NOT] NULL``, ``AND``/``OR``/``NOT`` (three-valued), ``CASE``, ``CAST``,
``EXTRACT(YEAR|MONTH|DAY ...)`` and date literals with ``INTERVAL`` days, months or years
(folded to a constant).  Anything else is a :class:`ConfigError` naming the construct.
"""

from __future__ import annotations

import calendar
import datetime as dt
import decimal
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ssbj.cq._sqlglot import sqlglot
from ssbj.cq.schema import _arrow_type
from ssbj.errors import ConfigError

Value = Any  # a pyarrow Array, ChunkedArray or Scalar (pyarrow has no type stubs)
Resolver = Callable[[Any], Value | None]

_CMP = {"EQ": "equal", "NEQ": "not_equal", "LT": "less", "LTE": "less_equal", "GT": "greater", "GTE": "greater_equal"}
_ARITH = {"Add": "add_checked", "Sub": "subtract_checked", "Mul": "multiply_checked"}


def unsupported(node: Any, what: str = "expression") -> ConfigError:
    """Return the error for a construct outside the supported subset, naming it."""
    return ConfigError(f"continuous query: {what} {type(node).__name__} ({node.sql()[:80]!r}) is not supported")


def _add_months(d: dt.date, months: int) -> dt.date:
    y, m = divmod(d.month - 1 + months, 12)
    year = d.year + y
    day = min(d.day, calendar.monthrange(year, m + 1)[1])
    return dt.date(year, m + 1, day)


def constant(node: Any) -> Any:
    """Python value of a constant expression (literal, date, date +/- interval), else ``None``... raises."""
    _, exp = sqlglot()
    if isinstance(node, exp.Paren):
        return constant(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        if any(ch in text for ch in ".eE"):
            return decimal.Decimal(text)
        return int(text)
    if isinstance(node, exp.Neg):
        return -constant(node.this)
    if isinstance(node, exp.Cast) and node.to.this == exp.DataType.Type.DATE:
        value = constant(node.this)
        try:
            return dt.date.fromisoformat(str(value))
        except ValueError as exc:
            raise ConfigError(f"continuous query: {node.sql()!r} is not a date") from exc
    if isinstance(node, (exp.Add, exp.Sub)) and isinstance(node.expression, exp.Interval):
        base = constant(node.this)
        if not isinstance(base, dt.date):
            raise unsupported(node, "interval arithmetic on a non-date")
        iv = node.expression
        amount = int(str(constant(iv.this)).strip())
        unit = (iv.unit.name if iv.unit is not None else "DAY").upper().rstrip("S")
        amount = -amount if isinstance(node, exp.Sub) else amount
        if unit == "DAY":
            return base + dt.timedelta(days=amount)
        if unit == "MONTH":
            return _add_months(base, amount)
        if unit == "YEAR":
            return _add_months(base, 12 * amount)
        raise unsupported(node, f"interval unit {unit}")
    raise unsupported(node)


_CONSTANT: dict[int, tuple[Any, bool]] = {}  # id(node) -> (node, answer); the node is kept, so its id stays its own


def is_constant(node: Any) -> bool:
    """Whether ``node`` references no column (memoised: evaluated for every micro-batch)."""
    hit = _CONSTANT.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    _, exp = sqlglot()
    answer = not any(isinstance(n, (exp.Column, exp.Star)) for n in node.walk())
    if len(_CONSTANT) > 100_000:  # plans come and go in tests: bound the memo
        _CONSTANT.clear()
    _CONSTANT[id(node)] = (node, answer)
    return answer


_FOLDED: dict[int, tuple[Any, pa.Scalar]] = {}  # id(node) -> (node, its constant as a scalar), as _CONSTANT


def _scalar(value: Any) -> pa.Scalar:
    if value is None:
        return pa.scalar(None, pa.null())
    return pa.scalar(value)


def _kleene(name: str, a: Value, b: Value) -> Value:
    return pc.call_function(name, [a, b])


def evaluate(node: Any, resolve: Resolver, length: int) -> Value:
    """Evaluate ``node``; ``resolve`` gives the array of a column (or of a pre-computed subtree)."""
    _, exp = sqlglot()
    got = resolve(node)
    if got is not None:
        return got
    if isinstance(node, (exp.Literal, exp.Cast, exp.Add, exp.Sub, exp.Neg, exp.Paren)) and is_constant(node):
        hit = _FOLDED.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        value = _scalar(constant(node))
        if len(_FOLDED) > 100_000:
            _FOLDED.clear()
        _FOLDED[id(node)] = (node, value)
        return value
    kind = type(node).__name__
    if isinstance(node, exp.Column):
        raise ConfigError(f"continuous query: column {node.sql()!r} is unknown")
    if isinstance(node, exp.Paren):
        return evaluate(node.this, resolve, length)
    if isinstance(node, exp.Null):
        return pa.scalar(None, pa.null())
    if isinstance(node, exp.Boolean):
        return pa.scalar(bool(node.this))
    if kind in _ARITH:
        a, b = evaluate(node.this, resolve, length), evaluate(node.expression, resolve, length)
        return pc.call_function(_ARITH[kind], [a, b])
    if isinstance(node, exp.Div):
        a, b = evaluate(node.this, resolve, length), evaluate(node.expression, resolve, length)
        fa, fb = pc.cast(a, pa.float64()), pc.cast(b, pa.float64())
        # SQL: x / 0 is NULL (DuckDB), not inf
        zero = pc.equal(fb, pa.scalar(0.0))
        return pc.if_else(zero, pa.scalar(None, pa.float64()), pc.divide(fa, fb))
    if isinstance(node, exp.Neg):
        return pc.negate_checked(evaluate(node.this, resolve, length))
    if kind in _CMP:
        a, b = evaluate(node.this, resolve, length), evaluate(node.expression, resolve, length)
        return pc.call_function(_CMP[kind], [a, b])
    if isinstance(node, exp.And):
        return _kleene("and_kleene", evaluate(node.this, resolve, length), evaluate(node.expression, resolve, length))
    if isinstance(node, exp.Or):
        return _kleene("or_kleene", evaluate(node.this, resolve, length), evaluate(node.expression, resolve, length))
    if isinstance(node, exp.Not):
        return pc.invert(evaluate(node.this, resolve, length))
    if isinstance(node, exp.Between):
        v = evaluate(node.this, resolve, length)
        lo, hi = evaluate(node.args["low"], resolve, length), evaluate(node.args["high"], resolve, length)
        return pc.and_kleene(pc.greater_equal(v, lo), pc.less_equal(v, hi))
    if isinstance(node, exp.In):
        if node.args.get("query") is not None or not all(is_constant(e) for e in node.expressions):
            raise unsupported(node, "IN with a subquery or non-constant list")
        v = evaluate(node.this, resolve, length)
        values = [constant(e) for e in node.expressions]
        arr = pa.array([x for x in values if x is not None])
        if isinstance(v, pa.Scalar):
            v = pa.array([v.as_py()] * length, v.type)
        hit = pc.is_in(v, value_set=arr.cast(v.type) if len(arr) else pa.array([], v.type))
        # x IN (...) is NULL for a NULL x, or when it misses and the list holds a NULL
        miss_null = pa.scalar(None, pa.bool_()) if None in values else pa.scalar(False)
        return pc.if_else(pc.is_null(v), pa.scalar(None, pa.bool_()), pc.if_else(hit, True, miss_null))
    if isinstance(node, exp.Is):
        if not isinstance(node.expression, exp.Null):
            raise unsupported(node, "IS with a non-NULL operand")
        v = evaluate(node.this, resolve, length)
        return pc.is_null(v)
    if isinstance(node, exp.Like):
        pattern = constant(node.expression)
        if not isinstance(pattern, str):
            raise unsupported(node, "LIKE with a non-constant pattern")
        return pc.match_like(evaluate(node.this, resolve, length), pattern)
    if isinstance(node, exp.Extract):
        unit = node.this.name.upper()
        fn = {"YEAR": pc.year, "MONTH": pc.month, "DAY": pc.day}.get(unit)
        if fn is None:
            raise unsupported(node, f"EXTRACT({unit})")
        return pc.cast(fn(evaluate(node.expression, resolve, length)), pa.int64())
    if isinstance(node, (exp.Year, exp.Month, exp.Day)):
        fn = {exp.Year: pc.year, exp.Month: pc.month, exp.Day: pc.day}[type(node)]
        return pc.cast(fn(evaluate(node.this, resolve, length)), pa.int64())
    if isinstance(node, exp.Case):
        if node.this is not None:
            raise unsupported(node, "CASE with an operand (use CASE WHEN)")
        default = node.args.get("default")
        out: Value = evaluate(default, resolve, length) if default is not None else pa.scalar(None, pa.null())
        for branch in reversed(node.args["ifs"]):
            cond = pc.fill_null(_as_array(evaluate(branch.this, resolve, length), length), False)
            then = evaluate(branch.args["true"], resolve, length)
            out = pc.if_else(cond, *_common(then, out))
        return out
    if isinstance(node, exp.Cast):
        typ, _ = _arrow_type(node.to, f"CAST {node.sql()!r}")
        return pc.cast(evaluate(node.this, resolve, length), typ)
    raise unsupported(node)


def _as_array(v: Value, length: int) -> pa.Array:
    if isinstance(v, pa.Scalar):
        return pa.array([v.as_py()] * length, v.type if v.type != pa.null() else pa.bool_())
    return v


def _common(a: Value, b: Value) -> tuple[Value, Value]:
    """Cast two CASE branches to one type (int and decimal to decimal, anything and double to double)."""
    ta, tb = a.type, b.type
    if ta == tb or tb == pa.null() or ta == pa.null():
        return a, b
    if pa.types.is_floating(ta) or pa.types.is_floating(tb):
        return pc.cast(a, pa.float64()), pc.cast(b, pa.float64())
    if pa.types.is_decimal(ta) and pa.types.is_integer(tb):
        return a, pc.cast(b, pa.decimal128(38, ta.scale))
    if pa.types.is_decimal(tb) and pa.types.is_integer(ta):
        return pc.cast(a, pa.decimal128(38, tb.scale)), b
    if pa.types.is_decimal(ta) and pa.types.is_decimal(tb):
        scale = max(ta.scale, tb.scale)
        return pc.cast(a, pa.decimal128(38, scale)), pc.cast(b, pa.decimal128(38, scale))
    return a, pc.cast(b, ta)


def to_array(v: Value, length: int) -> pa.Array:
    """Return an array of ``length`` rows from an evaluation result (a scalar is repeated)."""
    if isinstance(v, pa.ChunkedArray):
        return v.combine_chunks()
    return _as_array(v, length)


def where_mask(conditions: Sequence[Any], resolve: Resolver, length: int) -> np.ndarray:
    """Return which of ``length`` rows satisfy every condition, as SQL's WHERE: a NULL condition is not."""
    mask = None
    for cond in conditions:
        m = pc.fill_null(to_array(evaluate(cond, resolve, length), length), False)
        mask = m if mask is None else pc.and_(mask, m)
    return np.ones(length, np.bool_) if mask is None else np.asarray(mask)
