"""A plain reference evaluation of a MultiWaySpec over Arrow tables (the oracle of the SQL compiler).

Deliberately simple: filters first, then the edges in order, each a Python dict hash join of
the rows so far (lists of dicts per alias) with one master table; NULL keys never match, a
left edge keeps an unmatched row with the master's columns NULL. Masters are looked up by
their table name (``MasterInput.table``), as ``run_query`` receives them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from ssbj.core.multiway.spec import MultiWaySpec

Row = dict[str, dict[str, Any]]  # alias -> that input's row (None for a NULL-extended master)


def _rows(spec: MultiWaySpec, alias: str, table: pa.Table) -> list[dict[str, Any]]:
    expr = spec.filters.get(alias)
    if expr is not None:
        table = table.filter(expr)
    return table.to_pylist()


def evaluate(spec: MultiWaySpec, stream: pa.Table, masters: Mapping[str, pa.Table]) -> pa.Table:
    """The result rows of ``spec`` with ``stream`` (all its rows at once) and the master tables."""
    current: list[Row] = [{spec.stream: r} for r in _rows(spec, spec.stream, stream)]
    for edge in spec.edges:
        m = spec.master(edge.master)
        index: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        for r in _rows(spec, m.alias, masters[m.table]):
            key = tuple(r[c] for c in edge.master_columns)
            if None not in key:
                index[key].append(r)
        nxt: list[Row] = []
        for row in current:
            probe = row[edge.probe]
            key = None if probe is None else tuple(probe[c] for c in edge.probe_columns)
            hits = index.get(key, []) if key is not None and None not in key else []
            if hits:
                nxt += [{**row, m.alias: h} for h in hits]
            elif edge.kind == "left":
                nxt.append({**row, m.alias: None})
        current = nxt
    types = {spec.stream: stream.schema}
    types.update({m.alias: masters[m.table].schema for m in spec.masters})
    cols = {
        o.name: pa.array(
            [None if r[o.alias] is None else r[o.alias][o.column] for r in current],
            type=types[o.alias].field(o.column).type,
        )
        for o in spec.output
    }
    return pa.table(cols) if cols else pa.table({})
