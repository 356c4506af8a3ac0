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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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

    @property
    def jobs(self) -> list[str]:
        """Names of the jobs configured now."""
        return list(self.current.jobs)

    def reconfigure(self, jobs: Iterable[SharedJobSpec]) -> int:
        """Start a new epoch with ``jobs``; returns its number."""
        self.draining.append((self.epoch, self.current))
        self.epoch += 1
        self.current = SharedJoin(list(jobs), self.streams, self.masters, **self.options)
        self._drop_drained()
        return self.epoch

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
    def checkpoint(self, path: str | Path, checkpoint_id: int) -> None:
        """Save every live epoch under ``checkpoint_id``; the epochs manifest commits the switch."""
        root = Path(path)
        live = [*self.draining, (self.epoch, self.current)]
        for e, sj in live:
            sj.checkpoint(root / f"epoch-{e}", checkpoint_id)
        DirectoryStore(root / "epochs").write_manifest(
            checkpoint_id,
            {
                "files": [],
                "epochs": [[e, list(sj.jobs)] for e, sj in live],
                "finished": {k: v.__dict__ for k, v in self.finished.items()},
            },
        )

    def restore(self, path: str | Path, specs: dict[str, SharedJobSpec], checkpoint_id: int | None = None) -> int:
        """Return to a checkpoint; ``specs`` names every job of its epochs (filters are not serialised)."""
        root = Path(path)
        cid, m = DirectoryStore(root / "epochs").read_manifest(checkpoint_id)
        live = []
        for e, names in m["epochs"]:
            missing = [n for n in names if n not in specs]
            if missing:
                raise CheckpointError(f"checkpoint {cid} has jobs {missing} that were not given")
            sj = SharedJoin([specs[n] for n in names], self.streams, self.masters, **self.options)
            sj.restore(root / f"epoch-{e}", cid)
            live.append((int(e), sj))
        self.epoch, self.current = live[-1]
        self.draining = live[:-1]
        self.finished = {k: JobCounts(**v) for k, v in m["finished"].items()}
        return cid


def _add(into: dict[str, JobCounts], counts: dict[str, JobCounts]) -> None:
    for k, c in counts.items():
        t = into.setdefault(k, JobCounts())
        t.tuples_in += c.tuples_in
        t.output_rows += c.output_rows
        t.unmatched += c.unmatched
        t.waiting += c.waiting
        t.matched += c.matched
