"""Jobs added and removed at epoch boundaries (CLASH Section VI), exactly once per job.

An epoch is one configuration: a :class:`~ssbj.shared.operator.SharedJoin` of the jobs
configured at its start. :meth:`EpochedSharedJoin.reconfigure` (at a step boundary: the
caller's micro-batch boundary) starts a new epoch; every tuple pushed from then on goes to
it, while the previous epochs only finish their waiting tuples (their R-cycles), side by
side, and are dropped once drained. So every tuple is joined in exactly one epoch, and a
job's output is the batch join of the stream rows pushed while it was configured: a job
added at a boundary starts with the next tuple, a removed one still completes the tuples
it had already taken. Re-optimizing (new rates, new sharing) is the same switch with the
same job set.

Each epoch is checkpointed in a directory of its own whose name carries a random token:
an epoch started by an attempt that crashed before its first commit never shares files
with the epoch a later attempt starts under the same number (perhaps with other jobs).
Options given to :meth:`EpochedSharedJoin.reconfigure` (w, budget, algorithm) belong to
their epoch and are restored with it.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from ssbj.core.checkpoint import DirectoryStore
from ssbj.errors import CheckpointError
from ssbj.shared.operator import JobCounts, MasterSource, SharedJobSpec, SharedJoin


class EpochedSharedJoin:
    """A :class:`SharedJoin` whose job set can change between steps; see the module doc."""

    def __init__(
        self,
        jobs: Iterable[SharedJobSpec],
        streams: dict[str, pa.Schema],
        masters: dict[str, MasterSource],
        **options: Any,
    ) -> None:
        self.streams = streams
        self.masters = masters
        self.options = options
        self.epoch = 0
        self.current = SharedJoin(list(jobs), streams, masters, **options)
        self.draining: list[tuple[int, SharedJoin]] = []
        self.finished: dict[str, JobCounts] = {}  # counts of epochs already drained and dropped
        self._dirs: dict[int, str] = {0: _dirname(0)}
        self._opts: dict[int, dict[str, Any]] = {0: _plain(options)}

    @property
    def jobs(self) -> list[str]:
        """Names of the jobs configured now."""
        return list(self.current.jobs)

    def reconfigure(self, jobs: Iterable[SharedJobSpec], **options: Any) -> int:
        """Start a new epoch with ``jobs`` (and ``options`` over the constructor's); returns its number."""
        self.draining.append((self.epoch, self.current))
        self.epoch += 1
        self.current = SharedJoin(list(jobs), self.streams, self.masters, **{**self.options, **options})
        self._dirs[self.epoch] = _dirname(self.epoch)
        self._opts[self.epoch] = _plain(options)
        self._drop_drained()
        return self.epoch

    def epochs(self) -> list[tuple[int, SharedJoin]]:
        """Every live epoch, oldest first (the current one last)."""
        return [*self.draining, (self.epoch, self.current)]

    def push(self, stream: str, batch: pa.Table | pa.RecordBatch) -> None:
        """Take rows of ``stream``: they belong to the current epoch."""
        self.current.push(stream, batch)

    def pending(self, drain: bool = False) -> bool:
        """Whether a step has work: an older epoch still draining, or the current one's."""
        return any(sj.pending(drain=True) for _, sj in self.draining) or self.current.pending(drain)

    def step(self, drain: bool = False) -> dict[str, pa.Table]:
        """One step of every draining epoch and of the current one; each job's rows of this step."""
        parts: dict[str, list[pa.Table]] = {}
        for _, sj in self.draining:
            if sj.pending(drain=True):
                for k, t in sj.step(drain=True).items():
                    parts.setdefault(k, []).append(t)
        self._drop_drained()
        if self.current.pending(drain):
            for k, t in self.current.step(drain).items():
                parts.setdefault(k, []).append(t)
        return {k: pa.concat_tables(v) if len(v) > 1 else v[0] for k, v in parts.items()}

    def drain(self) -> Iterator[dict[str, pa.Table]]:
        """Finish every waiting tuple of every epoch."""
        while self.pending(drain=True):
            yield self.step(drain=True)

    def _drop_drained(self) -> None:
        keep = []
        for e, sj in self.draining:
            if sj.pending(drain=True):
                keep.append((e, sj))
            else:
                _add(self.finished, sj.counts())
        self.draining = keep

    def counts(self) -> dict[str, JobCounts]:
        """Each job's counters over all epochs."""
        out: dict[str, JobCounts] = {}
        _add(out, self.finished)
        for _, sj in self.draining:
            _add(out, sj.counts())
        _add(out, self.current.counts())
        return out

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(
        self,
        path: str | Path,
        checkpoint_id: int,
        meta: dict[str, Any] | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> None:
        """Save every live epoch under ``checkpoint_id``; the epochs manifest (with ``meta``) commits it.

        ``before_commit`` runs between the epochs' files and the manifest (the fault tests).
        """
        root = Path(path)
        live = self.epochs()
        for e, sj in live:
            sj.checkpoint(root / self._dirs[e], checkpoint_id)
        if before_commit is not None:
            before_commit()
        store = DirectoryStore(root / "epochs")
        store.write_manifest(
            checkpoint_id,
            {
                "files": [],
                "epochs": [[e, list(sj.jobs), self._dirs[e], self._opts.get(e, {})] for e, sj in live],
                "finished": {k: v.__dict__ for k, v in self.finished.items()},
                "meta": meta or {},
            },
        )
        # epoch directories no retained manifest names: drained epochs, and attempts that never committed
        used = {row[2] for i in store.manifests() for row in store.read_manifest(i)[1]["epochs"] if len(row) > 2}
        for d in root.glob("epoch-*"):
            if d.is_dir() and d.name not in used and d.name not in self._dirs.values():
                shutil.rmtree(d, ignore_errors=True)

    @staticmethod
    def checkpoint_meta(path: str | Path, checkpoint_id: int | None = None) -> tuple[int, dict[str, Any]] | None:
        """(id, meta) of a committed checkpoint (default: the newest), or None when there is none."""
        store = DirectoryStore(Path(path) / "epochs")
        if not store.path.exists() or store.latest() is None:
            return None
        cid, m = store.read_manifest(checkpoint_id)
        return cid, dict(m.get("meta", {}))

    @staticmethod
    def checkpoint_jobs(path: str | Path, checkpoint_id: int) -> list[list[str]]:
        """Return the job names of each live epoch of a committed checkpoint, oldest first."""
        _, m = DirectoryStore(Path(path) / "epochs").read_manifest(checkpoint_id)
        return [list(row[1]) for row in m["epochs"]]

    def restore(self, path: str | Path, specs: dict[str, SharedJobSpec], checkpoint_id: int | None = None) -> int:
        """Return to a checkpoint; ``specs`` names every job of its epochs (filters are not serialised)."""
        root = Path(path)
        cid, m = DirectoryStore(root / "epochs").read_manifest(checkpoint_id)
        live = []
        self._dirs, self._opts = {}, {}
        for row in m["epochs"]:
            e, names = int(row[0]), row[1]
            dirname = row[2] if len(row) > 2 else f"epoch-{e}"
            opts = row[3] if len(row) > 3 else {}
            missing = [n for n in names if n not in specs]
            if missing:
                raise CheckpointError(f"checkpoint {cid} has jobs {missing} that were not given")
            sj = SharedJoin([specs[n] for n in names], self.streams, self.masters, **{**self.options, **opts})
            sj.restore(root / dirname, cid)
            live.append((e, sj))
            self._dirs[e], self._opts[e] = dirname, dict(opts)
        self.epoch, self.current = live[-1]
        self.draining = live[:-1]
        self.finished = {k: JobCounts(**v) for k, v in m["finished"].items()}
        return cid


def _dirname(epoch: int) -> str:
    return f"epoch-{epoch}-{uuid.uuid4().hex[:8]}"


def _plain(options: dict[str, Any]) -> dict[str, Any]:
    """Return the options a manifest can hold (a cost model object is given again at restore)."""
    return {k: v for k, v in options.items() if _jsonable(v)}


def _jsonable(v: Any) -> bool:
    """Scalars, and lists of them (a plan's groups, w and budgets per group)."""
    if v is None or isinstance(v, str | int | float | bool):
        return True
    return isinstance(v, list) and all(_jsonable(x) for x in v)


def _add(into: dict[str, JobCounts], counts: dict[str, JobCounts]) -> None:
    for k, c in counts.items():
        t = into.setdefault(k, JobCounts())
        t.tuples_in += c.tuples_in
        t.output_rows += c.output_rows
        t.unmatched += c.unmatched
        t.waiting += c.waiting
        t.matched += c.matched
