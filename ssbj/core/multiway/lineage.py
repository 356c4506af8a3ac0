"""Which stream rows a multi-way join has finished, and whether each produced output.

A stream row fans out along the join tree: a many-to-many edge turns it into several
intermediate rows, a scanned master makes them wait for its R-cycle, an inner edge drops
those without a match. To count *source* rows (what an audit reconciles) every stream row
gets an id (its position in the stream, ``tuples_in`` before it) carried by all rows
derived from it. The ledger keeps, per source row that still has rows waiting, how many
wait and whether any of its rows was output already. After each step a source row with
none waiting is finished: *output* if at least one result row came from it, else
*dropped* (filtered by the stream's predicate, or no match on an inner edge). So

    tuples_in = source_rows_out + source_rows_dropped + waiting_source_rows

after every step. The arrays are sorted by id; their bytes count against the budget.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ssbj.errors import StateError

SOURCE_COLUMN = "__ssbj_src"
"""Stream column the operator adds: the source row id (int64)."""

BYTES_PER_PENDING = 17  # id (8), waiting rows (8), output flag (1)


class SourceLedger:
    """Source rows with rows still waiting; updated once per step."""

    def __init__(self) -> None:
        self.ids = np.zeros(0, np.int64)
        self.waiting = np.zeros(0, np.int64)
        self.output = np.zeros(0, bool)
        self._added: list[np.ndarray] = []
        self._removed: list[np.ndarray] = []
        self._out: list[np.ndarray] = []
        self._new: list[np.ndarray] = []

    # -------------------------------------------------------------- events of one step
    def admitted(self, ids: np.ndarray) -> None:
        """Stream rows entering the join (every one, filtered or not)."""
        self._new.append(ids)

    def waits(self, ids: np.ndarray) -> None:
        """Rows (by source id, with repeats) entering the waiting store."""
        self._added.append(ids)

    def leaves(self, ids: np.ndarray) -> None:
        """Rows (by source id, with repeats) leaving the waiting store."""
        self._removed.append(ids)

    def emitted(self, ids: np.ndarray) -> None:
        """Note result rows (by source id, with repeats)."""
        self._out.append(ids)

    # -------------------------------------------------------------- end of a step
    def settle(self) -> tuple[int, int]:
        """Apply the step's events; return (source rows finished with output, finished without)."""
        new = self._cat(self._new)
        added = self._cat(self._added)
        removed = self._cat(self._removed)
        out = self._cat(self._out)
        self._new, self._added, self._removed, self._out = [], [], [], []
        if not (len(new) or len(added) or len(removed) or len(out)):
            return 0, 0
        ids = np.concatenate([self.ids, new, added, removed, out])
        uniq, inv = np.unique(ids, return_inverse=True)
        n1, n2, n3 = len(new), len(added), len(removed)
        zeros, ones = np.zeros, np.ones
        delta = np.concatenate(
            [self.waiting, zeros(n1, np.int64), ones(n2, np.int64), -ones(n3, np.int64), zeros(len(out), np.int64)]
        )
        waiting = np.bincount(inv, weights=delta, minlength=len(uniq)).astype(np.int64)
        flag = np.concatenate([self.output.astype(np.int64), zeros(n1 + n2 + n3, np.int64), ones(len(out), np.int64)])
        output = np.bincount(inv, weights=flag, minlength=len(uniq)) > 0
        if (waiting < 0).any():
            raise StateError("a source row left the waiting store more often than it entered")
        done = waiting == 0
        finished_out = int((done & output).sum())
        finished_dropped = int((done & ~output).sum())
        keep = ~done
        self.ids, self.waiting, self.output = uniq[keep], waiting[keep], output[keep]
        return finished_out, finished_dropped

    @staticmethod
    def _cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, np.int64)

    # -------------------------------------------------------------- state
    @property
    def pending(self) -> int:
        """Source rows with rows still waiting."""
        return len(self.ids)

    def nbytes(self) -> int:
        """Bytes of the ledger's arrays."""
        return int(self.ids.nbytes + self.waiting.nbytes + self.output.nbytes)

    def arrays(self) -> dict[str, np.ndarray]:
        """State for a checkpoint (taken between steps)."""
        return {"ledger_ids": self.ids, "ledger_waiting": self.waiting, "ledger_output": self.output}

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore :meth:`arrays`."""
        self.ids = np.asarray(arrays["ledger_ids"], np.int64)
        self.waiting = np.asarray(arrays["ledger_waiting"], np.int64)
        self.output = np.asarray(arrays["ledger_output"], bool)


# ---------------------------------------------------------------------- one ledger per stream
def source_ids(table: pa.Table, column: str) -> np.ndarray:
    """Source ids in ``column`` of ``table`` (none if absent; NULL, on NULL-extended rows, skipped)."""
    if column not in table.column_names:
        return np.zeros(0, np.int64)
    c = table.column(column)
    if c.null_count:
        c = c.drop_null()
    return np.asarray(c.to_numpy(), dtype=np.int64)


def note(ledgers: list[SourceLedger], columns: list[str], event: str, table: pa.Table) -> None:
    """Tell each stream's ledger about rows (``waits``, ``leaves`` or ``emitted``) by the ids they carry.

    With a window join a pair carries the ids of both streams (one column each).
    """
    for ledger, column in zip(ledgers, columns, strict=False):
        ids = source_ids(table, column)
        if len(ids):
            getattr(ledger, event)(ids)


def stream_counts(
    counters: dict[str, int], aliases: tuple[str, ...], ledgers: list[SourceLedger], window: bool
) -> dict[str, dict[str, int]]:
    """Per stream alias: rows in = output + dropped + late + waiting (counters ``<name>.<side>`` with a window)."""
    out: dict[str, dict[str, int]] = {}
    for side, (alias, ledger) in enumerate(zip(aliases, ledgers, strict=False)):
        sfx = f".{side}" if window else ""
        out[alias] = {
            "rows_in": counters[f"rows_in{sfx}" if window else "tuples_in"],
            "output": counters[f"source_rows_out{sfx}"],
            "dropped": counters[f"source_rows_dropped{sfx}"],
            "late": counters[f"source_rows_late{sfx}"] if window else 0,
            "waiting": ledger.pending,
        }
    return out
