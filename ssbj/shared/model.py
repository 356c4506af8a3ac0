"""Binary enrichment jobs as a CLASH ILP instance, with the operator's own costs (Eq. 1-2).

A job joins a stream S (rate lambda_S, w_S tuples per step) with a master table M on
S.k = M.a. Its one probe order is <S, M>: each arriving tuple probes M's store.

* Store of M partitioned on a into P shards (``M, a, P``): its cyclic scan costs, per
  second, ``steps/s x (P c_fixed + b (c_io + c_h + c_b))`` (Eq. 2's terms that do not
  depend on the stream), with ``steps/s = max_S lambda_S / w_S`` over the streams of the
  jobs that read M: a shared step takes w_S tuples of each stream, so every tuple waits
  the same R-cycle as in an isolated job. This is the store's fixed cost.
* The step <S, (M, a, P)> costs ``lambda_S (c_h + c_e + c_s + c_a)`` (a tuple through the
  cache phase into H_S: Eq. 2's per-tuple terms with no cache hits), times P when S does
  not know a (broadcast). Jobs on the same stream and master with the same predicate share
  the step: their tuples are stored and probed once.
* ``capacity`` (core-seconds per second per shard): a store's scan and steps must fit
  into its P shards; this is what makes the ILP choose P > 1.

The per-output-row cost (c_o) and the stream decoding are the same for every plan of
the same jobs except that decoding happens once per stream when shared; both are
reported next to the ILP's cost, not inside it. Memory (Eq. 1 with real structure sizes)
is predicted for the chosen plan and for isolated execution.
"""

from __future__ import annotations

from dataclasses import dataclass

from ssbj.core.costmodel import DISK_ROW_OVERHEAD, HS_TUPLE_OVERHEAD, CostModel
from ssbj.errors import InputError
from ssbj.shared.ilp import Predicate, Query, Relation, Solution, build, solve

NARROW_ROW = 16.0  # bytes of a shared H_S tuple's row: join key and row id


@dataclass(frozen=True)
class JobSketch:
    """What the optimizer needs to know about one job."""

    name: str
    stream: str  # identity of the stream (topic, landing directory)
    stream_key: str
    master: str  # identity of the master table (database and table)
    master_key: str
    rate: float  # stream tuples per second
    v_s: float  # bytes per stream row
    master_rows: int  # R_t
    v_r: float  # bytes per projected master row
    step_rows: int  # w
    partition_rows: int  # b


@dataclass
class SharingPlan:
    """The ILP's choice for the jobs and the isolated baseline, both predicted."""

    solution: Solution
    stores: list[dict[str, object]]
    shared_cpu: float  # core-seconds per second (ILP objective)
    isolated_cpu: float
    shared_memory: float  # bytes
    isolated_memory: float
    decodes_shared: int
    decodes_isolated: int


def store_rows(mj: list[JobSketch], given: dict[str, int] | None = None) -> int:
    """Return b of the scan the jobs ``mj`` of one master share: ``given[master]``, else the largest of theirs."""
    if given and mj[0].master in given:
        return given[mj[0].master]
    return max(j.partition_rows for j in mj)


def instance(
    jobs: list[JobSketch],
    model: CostModel,
    shards: tuple[int, ...] = (1, 2, 4, 8),
    scan_rows: dict[str, int] | None = None,
) -> tuple[dict[str, Relation], list[Query]]:
    """Relations (streams and masters) and one query per job (``scan_rows``: b per master, :func:`store_rows`)."""
    k = model.k
    probe = 1e-9 * (k.c_h + k.c_e + k.c_s + k.c_a)
    rels: dict[str, Relation] = {}
    for j in jobs:
        s = rels.get(j.stream)
        attrs = tuple(sorted({*(s.attrs if s else ()), j.stream_key}))
        rels[j.stream] = Relation(j.stream, attrs, rate=j.rate, size=1.0, stream=True)
    for m in dict.fromkeys(j.master for j in jobs):
        mj = [j for j in jobs if j.master == m]
        attrs = tuple(sorted({j.master_key for j in mj}))
        steps = max(j.rate / j.step_rows for j in mj)
        b = store_rows(mj, scan_rows)
        fixed = tuple(steps * 1e-9 * (p * k.c_fixed + b * (k.c_io_row + k.c_h + k.c_b)) for p in shards)
        rels[m] = Relation(
            m, attrs, rate=1.0, size=1.0, stream=False, shards=shards, fixed_cost=fixed, probe_cost=probe
        )
    queries = [
        Query(j.name, (j.stream, j.master), (Predicate.of(j.stream, j.stream_key, j.master, j.master_key),), 1.0)
        for j in jobs
    ]
    return rels, queries


def isolated(jobs: list[JobSketch], model: CostModel) -> tuple[float, float]:
    """CPU (core-s/s) and memory (bytes) of every job on its own operator."""
    k = model.k
    cpu = mem = 0.0
    for j in jobs:
        steps = j.rate / j.step_rows
        cpu += steps * 1e-9 * (k.c_fixed + j.partition_rows * (k.c_io_row + k.c_h + k.c_b))
        cpu += j.rate * 1e-9 * (k.c_h + k.c_e + k.c_s + k.c_a)
        parts = -(-j.master_rows // j.partition_rows)
        mem += j.partition_rows * (j.v_r + DISK_ROW_OVERHEAD) + (parts + 1) * j.step_rows * (j.v_s + HS_TUPLE_OVERHEAD)
    return cpu, mem


def optimize(
    jobs: list[JobSketch],
    model: CostModel | None = None,
    capacity: float | None = 1.0,
    shards: tuple[int, ...] = (1, 2, 4, 8),
    scan_rows: dict[str, int] | None = None,
) -> SharingPlan:
    """Solve the sharing ILP for ``jobs``; predict CPU and memory of its plan and of isolated runs.

    ``scan_rows``: b of each master's shared scan where it is not the largest of its jobs' own
    (a scan already open, or pooled disk buffers); isolated runs keep each job's own b.
    """
    model = model or CostModel()
    rels, queries = instance(jobs, model, shards, scan_rows)
    try:
        sol = solve(build(rels, queries), rels, capacity=capacity)
    except InputError as exc:
        if capacity is None:
            raise
        raise InputError(
            f"{exc}: at these rates no store of at most {max(shards)} shards stays within a shard's capacity "
            f"of {capacity} core-s/s; raise the capacity or lower the rates"
        ) from exc
    by_name = {j.name: j for j in jobs}
    stores: dict[tuple[str, str, int], list[str]] = {}
    for (qname, _start), steps in sol.orders.items():
        (_, prefix, _preds) = steps[0]
        stores.setdefault(prefix[0], []).append(qname)
    readers: dict[str, int] = {}
    for names in stores.values():
        for st in {by_name[n].stream for n in names}:
            readers[st] = readers.get(st, 0) + 1
    out = []
    mem = 0.0
    kept: dict[str, int] = {}  # stream -> most tuples any of its stores keeps waiting
    for (m, a, p), names in stores.items():
        mj = [by_name[n] for n in names]
        b = store_rows(mj, scan_rows)
        parts = -(-mj[0].master_rows // b)
        w = {j.stream: j.step_rows for j in mj}
        v_r = sum({j.v_r for j in mj})  # upper bound of the union of projections
        # as SharedJoin does: a stream only this store reads keeps its rows (and bit set) in H_S
        inline = len(w) == 1 and readers[next(iter(w))] == 1
        row = (NARROW_ROW + 8 + mj[0].v_s) if inline else NARROW_ROW
        m_bytes = b * (v_r + DISK_ROW_OVERHEAD) + (parts + 1) * sum(w.values()) * (row + HS_TUPLE_OVERHEAD)
        mem += m_bytes
        if not inline:
            for s in w:
                kept[s] = max(kept.get(s, 0), (parts + 1) * w[s])
        out.append(
            {
                "master": m,
                "partitioned_on": a,
                "shards": p,
                "jobs": sorted(names),
                "memory": m_bytes,
                "rows_inline": inline,
            }
        )
    v_s = {j.stream: j.v_s for j in jobs}
    mem += sum(kept[s] * v_s[s] for s in kept)  # the shared stream store: each row once
    iso_cpu, iso_mem = isolated(jobs, model)
    return SharingPlan(
        solution=sol,
        stores=out,
        shared_cpu=sol.cost,
        isolated_cpu=iso_cpu,
        shared_memory=mem,
        isolated_memory=iso_mem,
        decodes_shared=len({j.stream for j in jobs}),
        decodes_isolated=len(jobs),
    )
