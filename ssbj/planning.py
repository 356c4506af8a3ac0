"""Join settings and the one planning step: settings + budget -> partition size b, w -> ``JoinSpec``.

The CLI (``ssbj join``, ``ssbj demo``), the streaming pipeline, :func:`ssbj.enrich` and
the pipeline benchmark all plan through :func:`plan_join`; the cost model itself
(:func:`ssbj.core.costmodel.plan_memory`) is called from here only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa

from ssbj.core.costmodel import CostModel, MemoryPlan, plan_memory
from ssbj.core.keys import check_compatible, key_family
from ssbj.core.rowsize import row_nbytes
from ssbj.core.spec import MAX_STEP_TUPLES, JoinSpec, Switching
from ssbj.errors import ConfigError, InputError
from ssbj.units import parse_size

DEFAULT_MEMORY = "256MiB"
"""The operator's memory budget when none is given (job files, ``ssbj join``, :func:`ssbj.enrich`)."""

_SAMPLE_ROWS = 65_536  # rows measured to estimate a row's bytes
_VAR_WIDTH_GUESS = 24  # bytes per variable-width value before any row is measured


def estimate_row_bytes(schema: pa.Schema, sample: pa.Table | None = None) -> float:
    """Bytes per row (v_S or v_R): measured on ``sample`` when it has rows, else from the schema.

    The measurement is the operator's own (:func:`ssbj.core.rowsize.row_nbytes`) over an
    evenly spaced sample of at most 65,536 rows; without rows, fixed-width columns count
    their width and variable-width ones 24 bytes.
    """
    if sample is not None and sample.num_rows and sample.num_columns:
        n = sample.num_rows
        if n > _SAMPLE_ROWS:
            sample = sample.take(np.linspace(0, n - 1, _SAMPLE_ROWS).astype(np.int64))
        return float(row_nbytes(sample).mean())
    total = 0
    for f in schema:
        try:
            total += f.type.bit_width // 8
        except ValueError:
            total += _VAR_WIDTH_GUESS
    return float(max(total, 1))


def check_key_types(stream_schema: pa.Schema, stream_key: str, master_schema: pa.Schema, master_key: str) -> str:
    """Return the key family both join keys share; InputError stating both types when they cannot be joined."""
    st, mt = stream_schema.field(stream_key).type, master_schema.field(master_key).type
    try:
        return check_compatible(st, mt)
    except InputError as exc:
        try:
            reason = f"{key_family(st)} and {key_family(mt)} keys cannot be compared"
        except InputError:
            reason = str(exc)
        raise InputError(
            f"cannot join stream key {stream_key!r} of type {st} with master key {master_key!r} of type {mt}: {reason}"
        ) from exc


@dataclass(frozen=True)
class JoinSettings:
    """What to join and within which budget: the one shape of a join's settings.

    ``partition_rows`` (b) and ``step_rows`` (w) are planned from ``memory_budget`` when
    not given; with ``step_rows`` given, w is fixed and the budget only plans b.
    """

    stream_key: str
    master_key: str
    master_columns: tuple[str, ...] | None = None  # None: every master column
    algorithm: Literal["ssbj", "meshjoin"] = "ssbj"
    join_type: Literal["inner", "left"] = "inner"
    memory_budget: int = parse_size(DEFAULT_MEMORY)
    switch_factor: float = 1.0
    eviction_interval: int = 10
    partition_rows: int | None = None
    step_rows: int | None = None
    prefetch: int = 0  # master partitions read ahead (ssbj.core.prefetch): the planner reserves their buffers
    hybrid: Literal["off", "auto", "always", "index"] = "off"  # the hybrid step's lookup path (docs/hybrid.md)
    switching: Switching = "pipelined"  # SSBJ's switching FSM: per value, or Algorithm 1's global R-cycles
    unique_key_switch: bool = True  # a master that vouches for a unique key decides in one R-cycle
    early_eviction: bool = True  # cold cached values leave between evictions (JoinSpec.early_eviction)
    threads: int = 1  # threads of the complete cache's probe and takes (JoinSpec.threads)
    index_cycle_tuples: int | None = None  # index mode's R-cycle in stream tuples (JoinSpec.index_cycle_tuples)
    # the master can hand partitions out in pieces (ssbj.contracts.MasterChunks: in-memory
    # Arrow): the planner sizes the disk buffer as one piece, and b for time alone
    disk_chunks: bool = False
    # its partitions are in memory and probed in one pass (ssbj.contracts.MasterResident):
    # the pieces then cost the plan no time
    resident_master: bool = False

    @property
    def needs_master_size(self) -> bool:
        """Whether planning needs |R| and v_R (b or w left to the budget)."""
        return not (self.partition_rows and self.step_rows)


@dataclass(frozen=True)
class JoinPlan:
    """The planned operator: its spec, b, and the cost model's plan when one was made."""

    spec: JoinSpec
    partition_rows: int
    memory: MemoryPlan | None


def join_spec(settings: JoinSettings, chunk_bytes: int, disk_chunk_rows: int | None = None) -> JoinSpec:
    """Return the operator's spec for ``settings`` with ``chunk_bytes`` of stream tuples per step."""
    s = settings
    return JoinSpec(
        stream_key=s.stream_key,
        master_key=s.master_key,
        master_columns=s.master_columns,
        algorithm=s.algorithm,
        switch_factor=s.switch_factor,
        eviction_interval=s.eviction_interval,
        hybrid=s.hybrid,
        switching=s.switching,
        unique_key_switch=s.unique_key_switch,
        early_eviction=s.early_eviction,
        threads=s.threads,
        index_cycle_tuples=s.index_cycle_tuples,
        chunk_bytes=max(1, chunk_bytes),
        memory_budget=None if s.step_rows else s.memory_budget,
        max_step_tuples=s.step_rows or MAX_STEP_TUPLES,
        disk_chunk_rows=disk_chunk_rows,
    )


def plan_join(
    settings: JoinSettings,
    stream_row_bytes: float,
    master_rows: int | None = None,
    master_row_bytes: float | None = None,
    cost_model: CostModel | None = None,
) -> JoinPlan:
    """Plan b and w for ``settings``: given values win, the cost model fills in the rest.

    ``master_rows`` and ``master_row_bytes`` are needed only when
    :attr:`JoinSettings.needs_master_size` (one ``COUNT`` for a database table).
    """
    s = settings
    if not s.needs_master_size:
        assert s.partition_rows and s.step_rows  # noqa: S101  (needs_master_size says so)
        return JoinPlan(join_spec(s, int(s.step_rows * stream_row_bytes)), s.partition_rows, None)
    if master_rows is None or master_row_bytes is None:
        raise ConfigError("plan_join needs master_rows and master_row_bytes when b or w is left to the budget")
    plan = plan_memory(
        s.memory_budget,
        master_rows,
        stream_row_bytes,
        master_row_bytes,
        cost_model or CostModel(),
        prefetch=s.prefetch,
        chunked=s.disk_chunks,
        resident=s.resident_master,
    )
    b = s.partition_rows or plan.partition_rows
    chunk = int(s.step_rows * stream_row_bytes) if s.step_rows else plan.chunk_bytes
    pieces = plan.disk_chunk_rows if s.disk_chunks and plan.disk_chunk_rows and plan.disk_chunk_rows < b else None
    return JoinPlan(join_spec(s, chunk, pieces), b, plan)
