"""Scan groups of the shared operator: which jobs share one scan, cache and H_S.

Without a plan, jobs that read the same master table with the same master key (and the
same stream key type) form one group, with the operator's one w and budget. With a plan
(:mod:`ssbj.shared.runplan`: the ILP's stores, w and budget per store) the groups are the
plan's, each with its own w and budget; a plan group whose jobs could not share one H_S
(another master, master key or key type) is refused rather than run otherwise.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.core.operator import SemiStreamJoin
from ssbj.core.spec import JoinSpec
from ssbj.errors import ConfigError
from ssbj.shared.streamstore import MASK

if TYPE_CHECKING:
    from ssbj.shared.operator import SharedJoin

KEY = "__ssbj_join_key"
RID = "__ssbj_row_id"
FIRST_ROW_GUESS = 32  # bytes of an H_S row before one is measured (key and row id: 16)
__all__ = ["KEY", "MASK", "RID", "Group", "build_groups"]


@dataclass
class Group:
    """One scan group: one :class:`SemiStreamJoin` serving its jobs."""

    master: str
    master_key: str
    key_type: pa.DataType
    jobs: list[str]
    streams: list[str]
    op: SemiStreamJoin
    schema: pa.Schema  # of the tuples in its H_S: key, row id (inline: bit set and stream columns)
    mcols: list[str]  # master columns it reads: the union of its jobs'
    inline: bool = False  # its one stream's rows live in its own H_S, not in the stream store
    stream_masks: dict[str, int] = field(default_factory=dict)  # stream -> bits of this group's jobs
    pending: deque[np.ndarray] = field(default_factory=deque)  # (row ids, bit sets) pushed, not yet read
    pending_rows: int = 0
    rows_read: int = 0  # master rows read by this group's disk phase
    served: int = 0  # tuples the cache phase answered (a measurement: not checkpointed)
    entered: int = 0  # tuples that went on to H_S


def build_groups(
    sj: SharedJoin,
    plan: list[list[str]] | None,
    rows: list[int] | None,
    budgets: list[int | None] | None,
) -> list[Group]:
    """Return the scan groups of ``sj``'s jobs: the plan's when given (see the module doc)."""
    keyed: dict[tuple[str, str, str], list[str]] = {}
    for name, j in sj.jobs.items():
        kt = sj.streams[j.spec.stream].field(j.spec.stream_key).type
        keyed.setdefault((j.spec.master, j.spec.master_key, str(kt)), []).append(name)
    if plan is None:
        names_list = list(keyed.values())
    else:
        names_list = [list(g) for g in plan]
        placed = [n for g in names_list for n in g]
        if sorted(placed) != sorted(sj.jobs) or len(set(placed)) != len(placed):
            raise ConfigError(f"the plan's groups {names_list} do not place each of the jobs {list(sj.jobs)} once")
        for names in names_list:
            if len({k for k, ns in keyed.items() if any(n in ns for n in names)}) != 1:
                raise ConfigError(
                    f"the plan groups jobs {names}, which do not read one master with one key and key type: "
                    "they cannot share one scan group"
                )
    readers: dict[str, int] = {}
    for names in names_list:
        for st in {sj.jobs[n].spec.stream for n in names}:
            readers[st] = readers.get(st, 0) + 1
    out: list[Group] = []
    for i, names in enumerate(names_list):
        first = sj.jobs[names[0]]
        key_type = sj.streams[first.spec.stream].field(first.spec.stream_key).type
        streams = list(dict.fromkeys(sj.jobs[n].spec.stream for n in names))
        mcols: list[str] = []
        for n in names:
            for c in sj.jobs[n].master_cols:
                if c not in mcols:
                    mcols.append(c)
        fields = [pa.field(KEY, key_type), pa.field(RID, pa.int64())]
        # a stream only this group reads keeps its rows in the group's H_S (no row id
        # lookups, no second copy); a stream several groups read is stored once
        inline = sj.share_rows == "auto" and len(streams) == 1 and readers[streams[0]] == 1
        if inline:
            schema = sj.streams[streams[0]]
            fields += [pa.field(MASK, pa.int64())] + [schema.field(c) for c in sj._keep[streams[0]]]
        h_schema = pa.schema(fields)
        w = rows[i] if rows is not None else sj.step_rows
        budget = budgets[i] if budgets is not None else sj.memory_budget
        # a step reads w tuples of each of the group's streams: the R-cycle in steps,
        # and so each tuple's wait, stays that of an isolated job of w
        spec = JoinSpec(
            stream_key=KEY,
            master_key=first.spec.master_key,
            master_columns=tuple(mcols),
            algorithm=sj.algorithm,
            # with a budget the core sizes its first ring from this before it has measured
            chunk_bytes=1 << 50 if budget is None else max(1, w * len(streams) * FIRST_ROW_GUESS),
            max_step_tuples=w * len(streams),
            memory_budget=budget,
        )
        m = sj.masters[first.spec.master]
        op = SemiStreamJoin(spec, m.scan, h_schema, m.schema, sj.cost_model)
        g = Group(first.spec.master, first.spec.master_key, key_type, names, streams, op, h_schema, mcols, inline)
        for n in names:
            j = sj.jobs[n]
            g.stream_masks[j.spec.stream] = g.stream_masks.get(j.spec.stream, 0) | int(j.bit)
        out.append(g)
    return out
