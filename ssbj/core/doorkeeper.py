"""Index mode's doorkeeper: a bit filter of the values looked up in this R-cycle and the last.

A value looked up once tells nothing of its rate: on a long-tailed stream most misses are
values seen once in many R-cycles. Caching each at its first lookup fills H_R with them
until the next eviction, and every one costs a refresh lookup meanwhile. The doorkeeper
(TinyLFU's name for it) remembers the values looked up in the current and the previous
R-cycle; a value is offered to the cache only at its second lookup within them (or with
two tuples in one step), i.e. with about one tuple per R-cycle or more, which is where
the inequality ``s_f * n_j > 1`` starts to favour it (:mod:`ssbj.core.indexmode`).

Two generations of a blocked bit filter (three bits in one 64-bit word per value, as
:mod:`ssbj.core.interest`): at each R-cycle start the current becomes the previous and a
new one is sized for the values the last held. A false positive only offers a value one
lookup early; exactness never depends on the filter. Its bytes count in the budget.
"""

from __future__ import annotations

import numpy as np

from ssbj.core.hashing import mix
from ssbj.core.interest import interest_set, interest_test
from ssbj.core.jit import njit

# mypy: disable-error-code="return-value,arg-type,no-any-return"

BITS_PER_VALUE = 8  # ~5% false positives for three bits in a word: an early offer, never a wrong join
GROWTH = 1.25  # a new generation is sized for this many times the values the last one held


@njit(cache=True)
def _seen(cur: np.ndarray, prev: np.ndarray, keys: np.ndarray, out: np.ndarray) -> int:  # pragma: no cover
    """Mark in ``out`` the keys either generation holds; set every key's bits in ``cur``; return the new."""
    fresh = 0
    for t in range(keys.shape[0]):
        h = mix(keys[t])
        hit = interest_test(cur, h) or interest_test(prev, h)
        out[t] = hit
        if not interest_test(cur, h):
            interest_set(cur, h)
            fresh += 1
    return fresh


def _words(values: int) -> int:
    return max(1, -(-max(values, 64) * BITS_PER_VALUE // 64))


class Doorkeeper:
    """The two generations' bits and how many values the current one took."""

    def __init__(self) -> None:
        self.cur = np.zeros(1, dtype=np.uint64)
        self.prev = np.zeros(1, dtype=np.uint64)
        self.added = 0

    @property
    def nbytes(self) -> int:
        """Bytes of both bit arrays."""
        return int(self.cur.nbytes + self.prev.nbytes)

    def seen(self, keys: np.ndarray) -> np.ndarray:
        """Mask of ``keys`` looked up before in this R-cycle or the last; all of them are remembered now."""
        out = np.zeros(len(keys), dtype=np.bool_)
        self.added += _seen(self.cur, self.prev, np.ascontiguousarray(keys, dtype=np.int64), out)
        return out

    def rotate(self, expect: int = 0) -> None:
        """At an R-cycle start: the current generation becomes the previous, a new one sized for the last's values."""
        self.prev = self.cur
        self.cur = np.zeros(_words(int(GROWTH * max(self.added, expect))), dtype=np.uint64)
        self.added = 0

    def load(self, cur: np.ndarray, prev: np.ndarray, added: int) -> None:
        """Restore the generations exactly as saved."""
        self.cur = np.asarray(cur, dtype=np.uint64).copy()
        self.prev = np.asarray(prev, dtype=np.uint64).copy()
        self.added = int(added)
