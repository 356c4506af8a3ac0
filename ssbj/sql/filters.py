"""Single-input SQL predicates as pyarrow compute expressions, with SQL's three-valued logic.

Comparisons with NULL give NULL and ``&``/``|``/``~`` are Kleene in Arrow, as in SQL; IN is
written as an OR of equalities so that ``x NOT IN (...)`` with a NULL ``x`` stays NULL (and
the row is dropped), which ``is_in`` would turn into true. Literals compared with a column
are cast to the column's type (``o_orderdate < '1995-03-15'`` compares dates, as DuckDB does).
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ssbj.errors import ConfigError
from ssbj.sql._sqlglot import exp
from ssbj.sql.parse import DIALECT, where

__all__ = ["to_arrow"]

_CMP = {
    "EQ": lambda a, b: a == b,
    "NEQ": lambda a, b: a != b,
    "GT": lambda a, b: a > b,
    "GTE": lambda a, b: a >= b,
    "LT": lambda a, b: a < b,
    "LTE": lambda a, b: a <= b,
}
_FLIP = {"EQ": "EQ", "NEQ": "NEQ", "GT": "LT", "GTE": "LTE", "LT": "GT", "LTE": "GTE"}


def _numeric(typ: pa.DataType) -> bool:
    return bool(pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ))


class _Arrow:
    def __init__(self, colname: Callable[[Any], str], schema: pa.Schema) -> None:
        self.colname = colname
        self.schema = schema

    def fail(self, node: Any, what: str) -> ConfigError:
        return ConfigError(f"{where(node)}{what} in a filter is not supported: {node.sql(dialect=DIALECT)}")

    def literal(self, node: Any) -> Any:
        """Return the Python value of a literal (None for NULL); ConfigError for anything else."""
        if isinstance(node, exp.Paren):
            return self.literal(node.this)
        if isinstance(node, exp.Null):
            return None
        if isinstance(node, exp.Boolean):
            return bool(node.this)
        if isinstance(node, exp.Literal):
            if node.is_string:
                return node.this
            # exact, as SQL reads 0.05 (a DECIMAL literal), not the nearest double
            return int(node.this) if node.is_int else decimal.Decimal(node.this)
        if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
            return -self.literal(node.this)
        if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
            target = node.to.this
            text = node.this.this
            try:
                if target == exp.DataType.Type.DATE:
                    return dt.date.fromisoformat(text)
                if target in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ, exp.DataType.Type.DATETIME):
                    return dt.datetime.fromisoformat(text)
            except ValueError as exc:
                raise ConfigError(f"{where(node)}bad {target.value} literal {text!r}") from exc
        if isinstance(node, exp.Column):
            raise ValueError("column")
        raise self.fail(node, "expression")

    def is_column(self, node: Any) -> bool:
        while isinstance(node, exp.Paren):
            node = node.this
        return isinstance(node, exp.Column)

    def column(self, node: Any) -> tuple[pc.Expression, pa.DataType]:
        while isinstance(node, exp.Paren):
            node = node.this
        name = self.colname(node)
        return pc.field(name), self.schema.field(name).type

    def scalar(self, value: Any, typ: pa.DataType | None, node: Any) -> pc.Expression:
        """``value`` as a scalar of the column's type when it converts (as DuckDB casts a literal)."""
        if value is None:
            return pc.scalar(pa.scalar(None, typ or pa.null()))
        if typ is not None and pa.types.is_decimal(typ) and isinstance(value, int | float):
            value = decimal.Decimal(str(value))  # decimal against decimal: Arrow finds the common scale
        if typ is not None:
            try:
                return pc.scalar(pa.scalar(value).cast(typ))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError) as exc:
                # 2.5 against an integer column, 0.055 against DECIMAL(15, 2): Arrow compares
                # the numbers in a common type, as SQL does
                if not (_numeric(typ) and isinstance(value, int | float | decimal.Decimal)):
                    raise ConfigError(
                        f"{where(node)}literal {value!r} does not fit column type {typ}: {node.sql(dialect=DIALECT)}"
                    ) from exc
        return pc.scalar(value)

    def operand_pair(self, a: Any, b: Any, node: Any) -> tuple[pc.Expression, pc.Expression]:
        if self.is_column(a) and self.is_column(b):
            return self.column(a)[0], self.column(b)[0]
        if self.is_column(a):
            col, typ = self.column(a)
            return col, self.scalar(self.literal(b), typ, node)
        for side in (a, b):
            if not isinstance(side, exp.Literal | exp.Null | exp.Boolean | exp.Neg | exp.Cast):
                raise self.fail(side, "expression")
        raise self.fail(node, "comparison of two constants")

    def __call__(self, node: Any) -> pc.Expression:
        if isinstance(node, exp.Paren):
            return self(node.this)
        if isinstance(node, exp.And):
            return self(node.this) & self(node.expression)
        if isinstance(node, exp.Or):
            return self(node.this) | self(node.expression)
        if isinstance(node, exp.Not):
            return ~self(node.this)
        name = type(node).__name__
        if name in _CMP:
            a, b = node.this, node.expression
            if not self.is_column(a) and self.is_column(b):
                a, b, name = b, a, _FLIP[name]
            left, right = self.operand_pair(a, b, node)
            return _CMP[name](left, right)
        negate = bool(node.args.get("negate")) if isinstance(node, exp.Expression) else False
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                raise self.fail(node, "IS other than IS [NOT] NULL")
            res = self.column(node.this)[0].is_null()
            return ~res if negate else res
        if isinstance(node, exp.In):
            if node.args.get("query") or node.args.get("unnest") or not node.expressions:
                raise ConfigError(f"{where(node)}subquery in IN is not supported")
            col, typ = self.column(node.this) if self.is_column(node.this) else (None, None)
            if col is None:
                raise self.fail(node, "IN without a column")
            ors = [col == self.scalar(self.literal(v), typ, node) for v in node.expressions]
            res = ors[0]
            for o in ors[1:]:
                res = res | o
            return ~res if negate else res
        if isinstance(node, exp.Between):
            if not self.is_column(node.this):
                raise self.fail(node, "BETWEEN without a column")
            col, typ = self.column(node.this)
            lo = self.scalar(self.literal(node.args["low"]), typ, node)
            hi = self.scalar(self.literal(node.args["high"]), typ, node)
            res = (col >= lo) & (col <= hi)
            return ~res if negate else res
        if isinstance(node, exp.Like | exp.ILike):
            if node.args.get("escape"):
                raise self.fail(node, "LIKE ... ESCAPE")
            pattern = self.literal(node.expression)
            if not isinstance(pattern, str) or "\\" in pattern:
                raise self.fail(node, "LIKE pattern other than a string literal without backslashes")
            res = pc.match_like(self.column(node.this)[0], pattern, ignore_case=isinstance(node, exp.ILike))
            return ~res if negate else res
        if isinstance(node, exp.Column):
            return self.column(node)[0]
        if isinstance(node, exp.Boolean):
            return pc.scalar(bool(node.this))
        raise self.fail(node, f"{node.key.upper()} expression")


def to_arrow(pred: Any, colname: Callable[[Any], str], schema: pa.Schema) -> pc.Expression:
    """``pred`` (a sqlglot predicate over one input) as a pyarrow compute expression.

    ``colname`` maps a column reference to the input's column name; ``schema`` is the
    input's schema (literals are cast to the compared column's type).
    """
    return _Arrow(colname, schema)(pred)
