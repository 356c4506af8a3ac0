"""Library use: enrich Arrow data with master data in one call, like a DataFrame join.

``ssbj.enrich(orders, customers, left_on="customer_id", right_on="id", memory="64MB")``
runs the SSBJ operator over ``orders`` as if it were arriving (in batches), with
``customers`` as R, and returns the enriched rows. b and w come from the budget through
:func:`ssbj.planning.plan_join`, as for ``ssbj join`` and the streaming job.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import pyarrow as pa

from ssbj.core.costmodel import CostModel
from ssbj.core.feed import replay
from ssbj.core.master import ArrowMaster
from ssbj.core.operator import SemiStreamJoin, StepResult
from ssbj.errors import ConfigError, InputError
from ssbj.planning import DEFAULT_MEMORY, JoinSettings, check_key_types, estimate_row_bytes, plan_join
from ssbj.units import parse_size

DEFAULT_BATCH_ROWS = 100_000


def null_padded(unmatched: pa.Table, schema: pa.Schema) -> pa.Table:
    """Return unmatched stream rows in the output ``schema``, master columns all NULL (a left join's rows)."""
    cols = list(unmatched.columns)
    for f in schema:
        if f.name not in unmatched.column_names:
            cols.append(pa.nulls(unmatched.num_rows, f.type))
    return pa.Table.from_arrays(cols[: len(schema)], schema=schema)


def collect(results: Iterable[StepResult], schema: pa.Schema, how: Literal["inner", "left"]) -> pa.Table:
    """Return the output rows of ``results``: the matches, plus the unmatched rows for a left join."""
    parts: list[pa.Table] = []
    unmatched: list[pa.Table] = []
    for r in results:
        if r.enriched.num_rows:
            parts.append(r.enriched)
        if how == "left" and r.unmatched.num_rows:
            unmatched.append(null_padded(r.unmatched, schema))
    parts += unmatched
    return pa.concat_tables(parts) if parts else schema.empty_table()


def enrich(
    stream: pa.Table | pa.RecordBatch | Iterable[pa.Table | pa.RecordBatch],
    master: pa.Table,
    *,
    left_on: str,
    right_on: str,
    how: Literal["inner", "left"] = "inner",
    memory: str | int = DEFAULT_MEMORY,
    columns: Sequence[str] | None = None,
    algorithm: Literal["ssbj", "meshjoin"] = "ssbj",
    batch_rows: int = DEFAULT_BATCH_ROWS,
    cost_model: CostModel | None = None,
) -> pa.Table:
    """Join every stream row with its master rows on ``left_on == right_on``.

    ``stream`` is a table, a record batch, or batches in arrival order; ``master`` is R.
    The result has the stream columns, then the master ``columns`` (default: all but
    ``right_on``; ``_master`` is appended to a name the stream already has). ``how="left"``
    keeps stream rows with no master row (and NULL keys), master columns NULL. Rows come in
    the order the join finishes them, not the input order. ``memory`` is the operator's
    budget (``64MB``, ``1GiB`` or bytes).
    """
    if how not in ("inner", "left"):
        raise ConfigError(f"how must be 'inner' or 'left', got {how!r}")
    if batch_rows < 1:
        raise ConfigError(f"batch_rows must be >= 1, got {batch_rows}")
    budget = parse_size(memory, "memory") if isinstance(memory, str) else int(memory)
    batches: Iterable[pa.Table | pa.RecordBatch]
    first: pa.Table  # the rows v_S is measured on
    if isinstance(stream, pa.Table):
        batches = stream.to_batches(max_chunksize=batch_rows)
        stream_schema, first = stream.schema, stream
    elif isinstance(stream, pa.RecordBatch):
        batches, stream_schema, first = [stream], stream.schema, pa.Table.from_batches([stream])
    else:
        items = list(stream)
        if not items:
            raise InputError("enrich: the stream has no batches (pass an empty table to get an empty result)")
        batches, stream_schema = items, items[0].schema
        first = items[0] if isinstance(items[0], pa.Table) else pa.Table.from_batches([items[0]])
    for name, schema, role in ((left_on, stream_schema, "stream"), (right_on, master.schema, "master")):
        if name not in schema.names:
            raise InputError(f"enrich: {role} has no column {name!r} (columns: {', '.join(schema.names)})")
    check_key_types(stream_schema, left_on, master.schema, right_on)
    wanted = list(columns) if columns is not None else [c for c in master.schema.names if c != right_on]
    missing = [c for c in wanted if c not in master.schema.names]
    if missing:
        raise InputError(f"enrich: master has no column {', '.join(map(repr, missing))}")
    projected = master.select(list(dict.fromkeys([right_on, *wanted])))
    settings = JoinSettings(
        stream_key=left_on,
        master_key=right_on,
        master_columns=tuple(wanted),
        algorithm=algorithm,
        join_type=how,
        memory_budget=budget,
        disk_chunks=True,  # an in-memory ArrowMaster hands partitions out in pieces
        resident_master=True,  # ... views probed in one pass
    )
    r_cols = projected.select(wanted)
    plan = plan_join(
        settings,
        estimate_row_bytes(stream_schema, first),
        projected.num_rows,
        estimate_row_bytes(r_cols.schema, r_cols),
        cost_model,
    )
    op = SemiStreamJoin(
        plan.spec, ArrowMaster(projected, plan.partition_rows), stream_schema, projected.schema, cost_model
    )
    return collect(replay(op, batches), op.output_schema, how)
