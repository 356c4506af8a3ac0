"""The query's answer as groups, maintained from the join results entering and leaving ΔQ.

Per group (the group-by values; without aggregates, one output row with its
multiplicity) the number of join results, and per aggregate the sum and the number of
non-NULL arguments: SUM is NULL when that number is 0, AVG is sum/number (a double, as in
DuckDB), COUNT(x) is the number.  Decimal sums are exact (``decimal`` at 200 digits).
A micro-batch's join results are evaluated and pre-aggregated with Arrow; the changed
groups are then merged here, and their old and new rows are the batch's delta.
"""

from __future__ import annotations

import decimal
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ssbj.cq.expr import constant, evaluate, to_array, where_mask
from ssbj.cq.values import from_python
from ssbj.errors import ConfigError

if TYPE_CHECKING:  # query.py builds a GroupState to check a plan's output types
    from ssbj.cq.query import QueryPlan

_EXACT = decimal.Context(prec=200)
_SMALL = 2048  # join results of a batch up to which they are pre-aggregated in Python


class GroupState:
    """Groups of the answer: key tuple -> [join results, (sum, non-NULL count) per aggregate]."""

    def __init__(self, plan: QueryPlan) -> None:
        self.plan = plan
        self.groups: dict[tuple[Any, ...], list[Any]] = {}
        self.layout: list[int] = list(range(len(plan.slots)))  # carried position -> slot index
        self.key_types: list[pa.DataType] = []
        self.arg_types: list[pa.DataType | None] = []
        empty = [from_python([], s.type) for s in plan.slots]
        resolve = plan.slot_resolver(empty)
        for k in plan.keys:
            t = to_array(evaluate(k, resolve, 0), 0).type
            self.key_types.append(pa.bool_() if t == pa.null() else t)
        for a in plan.aggregates:
            if a.arg is None:
                self.arg_types.append(None)
                continue
            t = to_array(evaluate(a.arg, resolve, 0), 0).type
            if a.func in ("sum", "avg") and not (
                pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_floating(t)
            ):
                raise ConfigError(f"continuous query: {a.func.upper()} of a {t} expression is not supported")
            self.arg_types.append(t)
        for r in plan.residual:
            t = to_array(evaluate(r, resolve, 0), 0).type
            if t not in (pa.bool_(), pa.null()):
                raise ConfigError(f"continuous query: WHERE condition {r.sql()!r} is not a boolean")

    # -- one micro-batch
    def _partial(self, rows: list[tuple[Any, ...]]) -> list[tuple[tuple[Any, ...], list[Any]]]:
        """Pre-aggregated join results: (key, [count, sum_1, nn_1, ...]) per group."""
        if not rows:
            return []
        plan = self.plan
        columns = list(zip(*rows, strict=True))
        slots: list[pa.Array] = [None] * len(plan.slots)  # type: ignore[list-item]
        for j, si in enumerate(self.layout):
            slots[si] = from_python(list(columns[j]), plan.slots[si].type)
        return self._partial_slots(slots, len(rows))

    def _partial_slots(self, slots: list[pa.Array] | None, n: int) -> list[tuple[tuple[Any, ...], list[Any]]]:
        """Pre-aggregated join results given as one array per slot (``n`` rows)."""
        if slots is None or n == 0:
            return []
        return self._partial_table(self._evaluate(slots, n, None)[0])

    def _evaluate(self, slots: list[pa.Array], n: int, plus: np.ndarray | None) -> tuple[pa.Table, np.ndarray | None]:
        """Group keys and aggregate arguments of ``n`` join results, those the residual conditions keep.

        With ``plus`` (per row: entering ΔQ, else leaving), also that flag of the rows kept.
        """
        plan = self.plan
        resolve = plan.slot_resolver(slots)
        mask = where_mask(plan.residual, resolve, n) if plan.residual else None
        cols: dict[str, pa.Array] = {}
        for i, k in enumerate(plan.keys):
            cols[f"k{i}"] = to_array(evaluate(k, resolve, n), n).cast(self.key_types[i])
        cols["one"] = pa.array(np.ones(n, np.int64))
        for i, a in enumerate(plan.aggregates):
            if a.arg is not None:
                cols[f"a{i}"] = to_array(evaluate(a.arg, resolve, n), n)
        table = pa.table(cols)
        if mask is not None:
            table = table.filter(pa.array(mask))
            if plus is not None:
                plus = plus[mask]
        return table, plus

    def _partial_table(self, table: pa.Table) -> list[tuple[tuple[Any, ...], list[Any]]]:
        """Pre-aggregated rows of :meth:`_evaluate`: (key, [count, sum_1, nn_1, ...]) per group."""
        plan = self.plan
        if table.num_rows == 0:
            return []
        key_names = [f"k{i}" for i in range(len(plan.keys))]
        if table.num_rows <= _SMALL and self._exact_args(table):
            return self._partial_small(table, key_names)
        aggs: list[tuple[str, str]] = [("one", "sum")]
        for i, a in enumerate(plan.aggregates):
            if a.arg is not None:
                aggs.append((f"a{i}", "count"))
                if a.func != "count":
                    aggs.append((f"a{i}", "sum"))
        grouped = table.group_by(key_names, use_threads=False).aggregate(aggs)
        out = []
        data = grouped.to_pydict()
        for j in range(grouped.num_rows):
            key = tuple(data[k][j] for k in key_names)
            vals: list[Any] = [data["one_sum"][j]]
            for i, a in enumerate(plan.aggregates):
                if a.arg is None:
                    vals.extend((None, data["one_sum"][j]))
                elif a.func == "count":
                    vals.extend((None, data[f"a{i}_count"][j]))
                else:
                    vals.extend((data[f"a{i}_sum"][j], data[f"a{i}_count"][j]))
            out.append((key, vals))
        return out

    def _exact_args(self, table: pa.Table) -> bool:
        """Whether Python groups and sums as Arrow does: integer/decimal arguments (exact), no float key (NaN)."""
        if any(pa.types.is_floating(table.column(k).type) for k in table.column_names if k.startswith("k")):
            return False
        return all(
            pa.types.is_integer(table.column(f"a{i}").type) or pa.types.is_decimal(table.column(f"a{i}").type)
            for i, a in enumerate(self.plan.aggregates)
            if a.arg is not None
        )

    def _partial_small(self, table: pa.Table, key_names: list[str]) -> list[tuple[tuple[Any, ...], list[Any]]]:
        """As the Arrow group-by below, in Python: for a small batch's few join results (Acero's setup dominates)."""
        plan = self.plan
        n = table.num_rows
        keys = list(zip(*(table.column(k).to_pylist() for k in key_names), strict=True)) if key_names else [()] * n
        args = {i: table.column(f"a{i}").to_pylist() for i, a in enumerate(plan.aggregates) if a.arg is not None}
        acc: dict[tuple[Any, ...], list[Any]] = {}
        for j, key in enumerate(keys):
            vals = acc.get(key)
            if vals is None:
                vals = acc[key] = [0] + [None, 0] * len(plan.aggregates)
            vals[0] += 1
            for i in args:
                v = args[i][j]
                if v is not None:
                    cur = vals[1 + 2 * i]
                    vals[1 + 2 * i] = (
                        v if cur is None else _EXACT.add(cur, v) if isinstance(v, decimal.Decimal) else cur + v
                    )
                    vals[2 + 2 * i] += 1
        out = []
        for key, vals in acc.items():
            for i, a in enumerate(plan.aggregates):
                if a.arg is None:
                    vals[2 + 2 * i] = vals[0]
                elif a.func == "count":
                    vals[1 + 2 * i] = None
            out.append((key, vals))
        return out

    def apply(
        self, plus: list[tuple[Any, ...]], minus: list[tuple[Any, ...]]
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """Merge a batch's join results; returns the (removed, added) output rows."""
        return self._merge(self._partial(plus), self._partial(minus))

    def apply_slots(
        self, slots: list[pa.Array] | None, plus: np.ndarray
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """As :meth:`apply`, with the join results as one array per slot and ``plus`` flagging those entering ΔQ.

        The keys and arguments are evaluated once for both signs (a batch's Arrow calls are a fixed cost).
        """
        if slots is None or len(plus) == 0:
            return self._merge([], [])
        table, kept = self._evaluate(slots, len(plus), plus)
        assert kept is not None  # noqa: S101
        if kept.all():
            return self._merge(self._partial_table(table), [])
        if not kept.any():
            return self._merge([], self._partial_table(table))
        return self._merge(
            self._partial_table(table.filter(pa.array(kept))), self._partial_table(table.filter(pa.array(~kept)))
        )

    def _merge(
        self, plus: list[tuple[tuple[Any, ...], list[Any]]], minus: list[tuple[tuple[Any, ...], list[Any]]]
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        before: dict[tuple[Any, ...], list[Any] | None] = {}
        for sign, part in ((1, plus), (-1, minus)):
            for key, vals in part:
                state = self.groups.get(key)
                if key not in before:
                    before[key] = None if state is None else list(state)
                if state is None:
                    state = [0] + [None, 0] * len(self.plan.aggregates)
                    self.groups[key] = state
                state[0] += sign * vals[0]
                for i in range(len(self.plan.aggregates)):
                    s, c = vals[1 + 2 * i], vals[2 + 2 * i]
                    if s is not None:
                        cur = state[1 + 2 * i]
                        if isinstance(s, decimal.Decimal):
                            add = s if sign > 0 else -s
                            state[1 + 2 * i] = add if cur is None else _EXACT.add(cur, add)
                        else:
                            state[1 + 2 * i] = (s if sign > 0 else -s) if cur is None else cur + sign * s
                    state[2 + 2 * i] += sign * c
                if state[0] == 0:
                    del self.groups[key]
                elif state[0] < 0:  # pragma: no cover - the engine never deletes what it did not insert
                    raise AssertionError(f"group {key} has a negative count")
        removed: list[tuple[Any, ...]] = []
        added: list[tuple[Any, ...]] = []
        for key, old in before.items():
            new = self.groups.get(key)
            old_rows = self._rows(key, old)
            new_rows = self._rows(key, new)
            if old_rows == new_rows:
                continue
            if self.plan.grouped:
                removed.extend(old_rows)
                added.extend(new_rows)
            else:  # a multiset of rows: only the difference in multiplicity
                diff = len(new_rows) - len(old_rows)
                (added if diff > 0 else removed).extend([(new_rows or old_rows)[0]] * abs(diff))
        return removed, added

    def _rows(self, key: tuple[Any, ...], state: list[Any] | None) -> list[tuple[Any, ...]]:
        plan = self.plan
        if state is None or state[0] == 0:
            if plan.global_agg:
                state = [0] + [None, 0] * len(plan.aggregates)
            else:
                return []
        row: list[Any] = []
        for o in plan.outputs:
            if o.key is not None:
                row.append(key[o.key])
            elif o.agg is not None:
                a = plan.aggregates[o.agg]
                s, c = state[1 + 2 * o.agg], state[2 + 2 * o.agg]
                if a.func == "count":
                    row.append(c)
                elif c == 0:
                    row.append(None)
                elif a.func == "sum":
                    row.append(s)
                else:
                    row.append(
                        float(_EXACT.divide(decimal.Decimal(s), decimal.Decimal(c)))
                        if not isinstance(s, float)
                        else s / c
                    )
            else:
                row.append(_const(o.const))
        return [tuple(row)] * (1 if plan.grouped else state[0])

    def output_schema(self) -> pa.Schema:
        """Arrow schema of the answer (and of the deltas, before ``_op``/``_seq``)."""
        plan = self.plan
        fields = []
        for o in plan.outputs:
            if o.key is not None:
                t = self.key_types[o.key]
            elif o.agg is not None:
                a = plan.aggregates[o.agg]
                at = self.arg_types[o.agg]
                if a.func == "count":
                    t = pa.int64()
                elif a.func == "avg":
                    t = pa.float64()
                elif at is not None and pa.types.is_decimal(at):
                    t = pa.decimal128(38, at.scale)
                elif at is not None and pa.types.is_integer(at):
                    t = pa.int64()
                else:
                    t = pa.float64()
            else:
                t = pa.scalar(_const(o.const)).type
            fields.append(pa.field(o.name, t))
        return pa.schema(fields)

    def rows(self) -> list[tuple[Any, ...]]:
        """Return the answer's rows (groups in insertion order)."""
        out: list[tuple[Any, ...]] = []
        if self.plan.global_agg and not self.groups:
            return self._rows((), None)
        for key, state in self.groups.items():
            out.extend(self._rows(key, state))
        return out

    def table(self, rows: list[tuple[Any, ...]] | None = None) -> pa.Table:
        """Rows (default: the answer) as a table, sorted by ORDER BY, else by every column."""
        schema = self.output_schema()
        rows = self.rows() if rows is None else rows
        cols = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
        table = pa.table({f.name: pa.array(list(c), f.type) for f, c in zip(schema, cols, strict=True)}, schema=schema)
        order = self.plan.order_by or [(f.name, False) for f in schema]
        return table.sort_by([(n, "descending" if d else "ascending") for n, d in order]) if table.num_rows else table


def _const(node: Any) -> Any:
    return constant(node)
