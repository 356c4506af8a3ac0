"""Column types at the operator's boundary: view layouts, dictionaries, temporal and decimal keys."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from reference import as_multiset, batch_join

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.hs import ring_key_bytes
from ssbj.core.rowsize import row_nbytes
from ssbj.errors import InputError


def _run(stream: pa.Table, master: pa.Table, cols: tuple[str, ...], algorithm: str = "ssbj") -> Counter[Any]:
    spec = JoinSpec("sk", "mk", cols, algorithm=algorithm, chunk_bytes=64)
    op = SemiStreamJoin(spec, ArrowMaster(master, 3), stream.schema, master.schema)
    out: Counter[Any] = Counter()
    for r in op.run(stream.to_batches(max_chunksize=7)):
        out += as_multiset(r.enriched)
    return out


@pytest.mark.parametrize("algorithm", ["ssbj", "meshjoin"])
def test_string_view_columns_and_keys(algorithm: str) -> None:
    keys = ["a", "b", None, "c", "a", "zz", "b"] * 30
    stream = pa.table({"sk": pa.array(keys, pa.string_view()), "p": pa.array([b"x"] * len(keys), pa.binary_view())})
    master = pa.table(
        {
            "mk": pa.array(["a", "b", "b", "q", None], pa.string_view()),
            "name": pa.array(list("vwxyz"), pa.string_view()),
        }
    )
    got = _run(stream, master, ("name",), algorithm)
    assert got == batch_join(stream, master, "sk", "mk", ["name"])
    assert row_nbytes(stream).tolist()[:2] == [8 + 1 + 8 + 1, 8 + 1 + 8 + 1]


@pytest.mark.parametrize(
    ("stype", "svals", "mtype", "mvals"),
    [
        (pa.dictionary(pa.int32(), pa.string()), ["x", "y", None, "x"], pa.string(), ["x", "x", "w"]),
        (pa.date32(), [1, 2, None, 1], pa.date32(), [1, 1, 3]),
        (pa.timestamp("us"), [10, 20, None, 10], pa.timestamp("us"), [10, 30, 10]),
        (pa.decimal128(10, 2), [Decimal("1.10"), Decimal("2.00"), None], pa.decimal128(10, 2), [Decimal("1.10")]),
        (pa.int32(), [1, 2, None, 1], pa.int64(), [1, 1, 5]),
    ],
)
def test_key_types(stype: pa.DataType, svals: list[Any], mtype: pa.DataType, mvals: list[Any]) -> None:
    svals = svals * 20
    stream = pa.table({"sk": pa.array(svals, stype), "i": pa.array(range(len(svals)), pa.int64())})
    master = pa.table({"mk": pa.array(mvals, mtype), "v": pa.array(range(len(mvals)), pa.int64())})
    got = _run(stream, master, ("v",))
    if pa.types.is_dictionary(stype):
        stream = stream.set_column(0, "sk", stream.column("sk").cast(pa.string()))
    assert got == batch_join(stream, master, "sk", "mk", ["v"])


@pytest.mark.parametrize(
    ("ktype", "ring_bytes"),
    [(pa.int8(), 4), (pa.int16(), 4), (pa.int32(), 4), (pa.uint16(), 4), (pa.date32(), 4), (pa.uint32(), 8)],
)
@pytest.mark.parametrize("algorithm", ["ssbj", "meshjoin"])
def test_keys_of_32_bits_or_fewer_take_4_bytes_in_h_s_and_stay_exact_across_a_restore(
    ktype: pa.DataType, ring_bytes: int, algorithm: str, tmp_path: Any
) -> None:
    """H_S keeps such keys in 4 bytes (uint32 needs 8), counted so; extremes, NULLs and a restore stay exact."""
    lo, hi = {8: (-128, 127), 16: (-(2**15), 2**15 - 1), 32: (-(2**31), 2**31 - 1)}[ktype.bit_width]
    if pa.types.is_unsigned_integer(ktype):
        lo, hi = 0, 2**ktype.bit_width - 1
    if pa.types.is_date32(ktype):  # the days Python's dates reach (the reference reads them as dates)
        lo, hi = -719_162, 2_932_896
    vals = [lo, hi, 0, 1, None, lo, 7, hi, 3, None]

    def col(v: list[Any]) -> pa.Array:  # date32 only from int32
        return pa.array(v, pa.int64()).cast(pa.int32() if pa.types.is_date32(ktype) else ktype).cast(ktype)

    stream = pa.table({"sk": col(vals * 25), "i": pa.array(range(250), pa.int64())})
    master = pa.table({"mk": col([lo, hi, hi, 7, 5]), "v": pa.array(range(5), pa.int64())})
    spec = JoinSpec("sk", "mk", ("v",), algorithm=algorithm, chunk_bytes=64)
    op = SemiStreamJoin(spec, ArrowMaster(master, 2), stream.schema, master.schema)
    assert op.hs.ring_key.itemsize == ring_bytes == ring_key_bytes(ktype, False)
    assert op._key_overhead == ring_bytes - ktype.bit_width // 8  # bytes H_S holds beyond the row's own key
    out: Counter[Any] = Counter()
    batches = stream.to_batches(max_chunksize=9)
    for b in batches[:10]:
        op.push(b)
    for _ in range(12):
        out += as_multiset(op.step().enriched)
    assert op.hs.nbytes() == sum(a.nbytes for a in (op.hs.ring_key, op.hs.link, op.hs.hix)) + op.hs.rows.nbytes()
    store = DirectoryStore(tmp_path)
    op.checkpoint(store, 0)
    op = SemiStreamJoin.restore(store, spec, ArrowMaster(master, 2), stream.schema, master.schema)
    assert op.hs.ring_key.itemsize == ring_bytes
    for r in op.run(batches[10:]):
        out += as_multiset(r.enriched)
    assert out == batch_join(stream, master, "sk", "mk", ["v"])


def test_incompatible_and_float_keys_are_rejected() -> None:
    stream = pa.table({"sk": pa.array([1.5]), "i": pa.array([1])})
    master = pa.table({"mk": pa.array([1.5]), "v": pa.array([1])})
    with pytest.raises(InputError, match="floating-point"):
        SemiStreamJoin(JoinSpec("sk", "mk"), ArrowMaster(master, 1), stream.schema, master.schema)
    master = pa.table({"mk": pa.array(["1"]), "v": pa.array([1])})
    stream = pa.table({"sk": pa.array([1]), "i": pa.array([1])})
    with pytest.raises(InputError, match="incompatible"):
        SemiStreamJoin(JoinSpec("sk", "mk"), ArrowMaster(master, 1), stream.schema, master.schema)
