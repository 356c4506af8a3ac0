"""What a multi-way enrichment joins: the contract between the SQL front end and the operator.

The SQL front end (``ssbj.sql``) compiles a SELECT into a :class:`MultiWaySpec`; the
operator (``ssbj.core.multiway``) runs one. Inputs are named by their alias in the query.
The joins form a tree rooted at the stream: an edge probes a master table with columns of
an input already joined (the stream, or a master closer to the root), so chains
(stream -> customer -> nation) and stars are both trees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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

    def __post_init__(self) -> None:
        aliases = [self.stream, *(m.alias for m in self.masters)]
        if len(set(aliases)) != len(aliases):
            raise ConfigError(f"multi-way join: input aliases must be unique, got {aliases}")
        joined = {self.stream}
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
