"""What a multi-way enrichment joins: the contract between the SQL front end and the operator.

The SQL front end (``ssbj.sql``) compiles a SELECT into a :class:`MultiWaySpec`; the
operator (``ssbj.core.multiway``) runs one. Inputs are named by their alias in the query.
The joins form a tree rooted at the stream: an edge probes a master table with columns of
an input already joined (the stream, or a master closer to the root), so chains
(stream -> customer -> nation) and stars are both trees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

import pyarrow.compute as pc

from ssbj.errors import ConfigError

JoinKind = Literal["inner", "left"]


@dataclass(frozen=True)
class MasterInput:
    """A master table: its alias, the name it is read by, and the columns the query needs."""

    alias: str
    table: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class JoinEdge:
    """``<master alias>.<master_columns> = <probe alias>.<probe_columns>`` (equi-join, composite allowed)."""

    master: str
    probe: str
    probe_columns: tuple[str, ...]
    master_columns: tuple[str, ...]
    kind: JoinKind = "inner"


@dataclass(frozen=True)
class OutputColumn:
    """One column of the result: ``<alias>.<column> AS name``."""

    name: str
    alias: str
    column: str


TimeOffset = int | timedelta  # int for integer event-time columns, timedelta for timestamps


@dataclass(frozen=True)
class StreamWindow:
    """A second stream joined with the first within an event-time band (inner or left join).

    ``<stream>.<keys> = <first>.<probe_keys> AND <stream>.<time> BETWEEN <first>.<probe_time> - lower
    AND <first>.<probe_time> + upper``. A row is late when its time is below its stream's
    watermark: the largest time seen in that stream before its batch, minus ``lateness``.
    """

    stream: str
    columns: tuple[str, ...]
    keys: tuple[str, ...]
    probe_keys: tuple[str, ...]
    time: str
    probe_time: str
    lower: TimeOffset
    upper: TimeOffset
    lateness: TimeOffset = 0
    kind: JoinKind = "inner"  # left: a first-stream row without a match leaves NULL-extended when its window closes


@dataclass(frozen=True)
class MultiWaySpec:
    """A stream joined with master tables along a tree of equi-join edges.

    ``filters`` hold, per input alias, a predicate over that input's own columns (a
    pyarrow compute expression), applied before the input takes part in any join.
    """

    stream: str
    stream_columns: tuple[str, ...]
    masters: tuple[MasterInput, ...]
    edges: tuple[JoinEdge, ...]
    output: tuple[OutputColumn, ...]
    filters: dict[str, pc.Expression] = field(default_factory=dict)
    window: StreamWindow | None = None

    @property
    def streams(self) -> tuple[str, ...]:
        """The stream aliases: the first, and the one joined within a window if any."""
        return (self.stream,) if self.window is None else (self.stream, self.window.stream)

    def __post_init__(self) -> None:
        aliases = [*self.streams, *(m.alias for m in self.masters)]
        if len(set(aliases)) != len(aliases):
            raise ConfigError(f"multi-way join: input aliases must be unique, got {aliases}")
        w = self.window
        if w is not None:
            if not w.keys or len(w.keys) != len(w.probe_keys):
                raise ConfigError("multi-way join: the window join needs equal, non-empty key column lists")
            if w.kind not in ("inner", "left"):
                raise ConfigError(f"multi-way join: window join kind must be inner or left, got {w.kind!r}")
            offsets = (w.lower, w.upper, w.lateness)
            kinds = {isinstance(o, timedelta) for o in offsets}
            if len(kinds) > 1 or any(isinstance(o, bool) for o in offsets):
                raise ConfigError("multi-way join: window bounds and lateness must all be ints or all timedeltas")
            zero = timedelta(0) if isinstance(w.lateness, timedelta) else 0
            if w.lateness < zero:  # type: ignore[operator]
                raise ConfigError(f"multi-way join: lateness must be >= 0, got {w.lateness}")
        joined = set(self.streams)
        for e in self.edges:
            if e.probe not in joined:
                raise ConfigError(
                    f"multi-way join: edge to {e.master!r} probes {e.probe!r}, which is not joined before it"
                )
            if e.master in joined or e.master not in aliases:
                raise ConfigError(f"multi-way join: {e.master!r} is not a master table joined exactly once")
            if not e.probe_columns or len(e.probe_columns) != len(e.master_columns):
                raise ConfigError(f"multi-way join: edge to {e.master!r} needs equal, non-empty column lists")
            joined.add(e.master)
        if joined != set(aliases):
            raise ConfigError(f"multi-way join: not joined: {sorted(set(aliases) - joined)}")
        for a in self.filters:
            if a not in joined:
                raise ConfigError(f"multi-way join: filter on unknown input {a!r}")

    def master(self, alias: str) -> MasterInput:
        """Return the master input named ``alias``."""
        for m in self.masters:
            if m.alias == alias:
                return m
        raise KeyError(alias)
