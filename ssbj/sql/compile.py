"""A :class:`LogicalQuery` as a :class:`MultiWaySpec`: the join tree rooted at the stream.

Inner joins before the first LEFT JOIN are reordered breadth-first from the stream (any
order gives the same rows); from the first LEFT JOIN on, the FROM order is kept, because
``(s LEFT JOIN c) JOIN n`` and ``s LEFT JOIN (c JOIN n)`` differ. The operator evaluates the
edges in order, each a left-deep join of the rows so far with one master table.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import timedelta

import pyarrow as pa

from ssbj.core.multiway.spec import JoinEdge, MasterInput, MultiWaySpec, StreamWindow, TimeOffset
from ssbj.errors import ConfigError
from ssbj.sql.band import FORM, Band
from ssbj.sql.logical import Equality, LogicalQuery, parse_query

__all__ = ["compile_query", "compile_sql"]


def _line(eq: Equality | Band) -> str:
    return f"line {eq.line}: " if eq.line is not None else ""


def _edge(master: str, kind: str, eqs: list[Equality], joined: set[str]) -> JoinEdge:
    """One edge from the equalities linking ``master`` with the inputs joined so far."""
    probes = sorted({eq.other(master)[0] for eq in eqs})
    if len(probes) > 1:
        # the multi-way spec joins along a tree and has no residual predicates: a second
        # connection to the inputs already joined closes a cycle
        extra = next(eq for eq in eqs if eq.other(master)[0] != probes[0])
        raise ConfigError(
            f"{_line(extra)}join predicate {extra.text} closes a cycle in the join graph "
            f"({master!r} is already connected to {probes[0]!r}); the multi-way operator joins along a tree"
        )
    probe = probes[0]
    assert probe in joined  # noqa: S101 - callers pass only equalities to joined inputs
    pairs = list(dict.fromkeys((eq.other(master)[1], eq.side(master)[1]) for eq in eqs))
    return JoinEdge(
        master=master,
        probe=probe,
        probe_columns=tuple(p for p, _ in pairs),
        master_columns=tuple(m for _, m in pairs),
        kind="left" if kind == "left" else "inner",
    )


def _window(q: LogicalQuery, stream: str, second: str, eqs: list[Equality], lateness: float, kind: str) -> StreamWindow:
    """Return the window joining stream ``second`` with ``stream``: its band and the equalities between the two."""
    bands = [b for b in q.bands if b.aliases == {stream, second}]
    if len(bands) != 1 or len(q.bands) != 1:
        raise ConfigError(
            f"two streams ({stream!r}, {second!r}) are joined within one event-time window: "
            f"write exactly one band predicate {FORM} in the ON clause of {second!r}"
        )
    if not eqs:
        raise ConfigError(f"the window join of {second!r} needs an equality {second}.x = {stream}.y in its ON clause")
    band = bands[0].bounding(second)
    off: TimeOffset
    if isinstance(band.lower, timedelta):
        off = timedelta(seconds=lateness)
    elif float(lateness).is_integer():
        off = int(lateness)
    else:
        raise ConfigError(f"lateness of an integer event-time column must be an integer, got {lateness}")
    pairs = list(dict.fromkeys((eq.side(second)[1], eq.other(second)[1]) for eq in eqs))
    return StreamWindow(
        stream=second,
        columns=(),
        keys=tuple(k for k, _ in pairs),
        probe_keys=tuple(p for _, p in pairs),
        time=band.time[1],
        probe_time=band.base[1],
        lower=band.lower,
        upper=band.upper,
        lateness=off,
        kind="left" if kind == "left" else "inner",
    )


def compile_query(q: LogicalQuery, streams: Collection[str], lateness: float = 0) -> MultiWaySpec:
    """Compile ``q`` with the inputs read by a name in ``streams`` as streams (one, or two joined in a window).

    ``lateness``: allowed lateness of a window join (seconds for TIMESTAMP event times, the
    column's units for integer ones).
    """
    stream_inputs = [i for i in q.inputs if i.table in streams]
    if not stream_inputs:
        raise ConfigError(
            f"no stream among the inputs ({', '.join(i.table for i in q.inputs)}): name one with --stream"
        )
    if len(stream_inputs) > 2:
        raise ConfigError(
            f"the multi-way operator joins at most two streams (streams: {', '.join(i.alias for i in stream_inputs)})"
        )
    if len(stream_inputs) == 1 and q.bands:
        b = q.bands[0]
        raise ConfigError(f"{_line(b)}a window predicate joins two streams, but only one is given: {b.text}")
    if lateness < 0:
        raise ConfigError(f"lateness must be >= 0, got {lateness}")
    stream = stream_inputs[0].alias
    second = stream_inputs[1].alias if len(stream_inputs) == 2 else None
    order = [i.alias for i in q.inputs]
    first_left = next((k + 1 for k, s in enumerate(q.steps) if s.kind == "left"), len(order))
    prefix = set(order[:first_left])
    if stream not in prefix:
        raise ConfigError(f"the stream {stream!r} must be on the preserved side of every LEFT JOIN")
    step_of = {s.alias: s for s in q.steps}
    left_window = second is not None and second in step_of and step_of[second].kind == "left"
    if second is not None and second not in prefix and not (left_window and order[first_left] == second):
        raise ConfigError(
            f"the second stream {second!r} must be joined before the first LEFT JOIN, or by the first LEFT JOIN"
        )
    # inner equalities of the prefix: ON clauses of its inner joins and WHERE
    pending = [eq for a in order[1:first_left] for eq in step_of[a].on]
    pending += [eq for eq in q.where_equalities if eq.aliases <= prefix]
    window = None
    if second is not None:
        src = list(step_of[second].on) if left_window else pending
        between = [eq for eq in src if eq.aliases == {stream, second}]
        if left_window and len(between) < len(src):
            extra = next(eq for eq in src if eq not in between)
            raise ConfigError(
                f"{_line(extra)}the ON clause of the LEFT window join of {second!r} may only compare it "
                f"with the stream {stream!r}: {extra.text}"
            )
        window = _window(q, stream, second, between, lateness, "left" if left_window else "inner")
        pending = [eq for eq in pending if eq not in between]
    later_where: dict[str, list[Equality]] = {}
    for eq in q.where_equalities:
        if not eq.aliases <= prefix:
            last = max(eq.aliases, key=order.index)
            later_where.setdefault(last, []).append(eq)
    joined = {stream} if second is None else {stream, second}
    edges: list[JoinEdge] = []
    while not prefix <= joined:
        frontier = [a for a in order if a in prefix and a not in joined]
        nxt = next((a for a in frontier if any(a in eq.aliases and eq.other(a)[0] in joined for eq in pending)), None)
        if nxt is None:
            raise ConfigError(
                f"cross join: no equi-join predicate connects {', '.join(frontier)} with {', '.join(sorted(joined))}"
            )
        mine = [eq for eq in pending if nxt in eq.aliases and eq.other(nxt)[0] in joined]
        edges.append(_edge(nxt, "inner", mine, joined))
        pending = [eq for eq in pending if eq not in mine]
        joined.add(nxt)
        inside = [eq for eq in pending if eq.aliases <= joined]
        if inside:
            eq = inside[0]
            raise ConfigError(
                f"{_line(eq)}join predicate {eq.text} closes a cycle in the join graph; "
                "the multi-way operator joins along a tree"
            )
    for alias in order[first_left:]:
        if alias == second:
            continue
        step = step_of[alias]
        eqs = list(step.on) + later_where.get(alias, [])
        if not eqs:
            raise ConfigError(f"cross join: no equi-join predicate connects {alias!r} with the inputs before it")
        edges.append(_edge(alias, step.kind, eqs, joined))
        joined.add(alias)
    needed: dict[str, list[str]] = {a: [] for a in order}

    def need(alias: str, col: str) -> None:
        if col not in needed[alias]:
            needed[alias].append(col)

    if window is not None:
        for c in (*window.keys, window.time):
            need(window.stream, c)
        for c in (*window.probe_keys, window.probe_time):
            need(stream, c)
    for e in edges:
        for c in e.probe_columns:
            need(e.probe, c)
        for c in e.master_columns:
            need(e.master, c)
    for alias, cols in q.filter_columns.items():
        for c in cols:
            need(alias, c)
    for o in q.output:
        need(o.alias, o.column)
    masters = tuple(
        MasterInput(alias=a, table=q.input(a).table, columns=tuple(needed[a]))
        for a in order
        if a not in (stream, second)
    )
    if window is not None:
        window = StreamWindow(**{**window.__dict__, "columns": tuple(needed[window.stream])})
    return MultiWaySpec(
        stream=stream,
        stream_columns=tuple(needed[stream]),
        masters=masters,
        edges=tuple(edges),
        output=q.output,
        filters=dict(q.filters),
        window=window,
    )


def compile_sql(
    text: str, schemas: Mapping[str, pa.Schema], streams: Collection[str], lateness: float = 0
) -> MultiWaySpec:
    """Parse ``text`` over ``schemas`` (input name -> schema) and compile it with ``streams`` as streams."""
    return compile_query(parse_query(text, schemas), streams, lateness)
