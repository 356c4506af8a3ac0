"""Write a change directory for ``ssbj maintain``: TPC-H loaded, then one order cancelled.

    python examples/cq/cancel_order.py TPCH_DIR CHANGES_DIR ORDERKEY

TPCH_DIR holds tpchgen-cli's Parquet files (nation, supplier, customer, orders, lineitem);
every row is inserted (``_op`` '+', ``_seq`` in file order), then the order's lines and
the order itself are deleted (``_op`` '-'), the way a cancellation arrives from the source.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ssbj.cq.changes import plain_strings

RELATIONS = ("nation", "supplier", "customer", "orders", "lineitem")


def main(tpch: Path, out: Path, orderkey: int) -> None:
    """Write ``out/<relation>.parquet`` with the load and the cancellation."""
    out.mkdir(parents=True, exist_ok=True)
    seq = 0
    tables = {r: plain_strings(pq.read_table(tpch / f"{r}.parquet")) for r in RELATIONS}
    loads = {}
    for r in RELATIONS:
        t = tables[r]
        loads[r] = t.append_column("_op", pa.array(["+"] * t.num_rows)).append_column(
            "_seq", pa.array(range(seq, seq + t.num_rows), pa.int64())
        )
        seq += t.num_rows
    for r, key in (("lineitem", "l_orderkey"), ("orders", "o_orderkey")):
        gone = tables[r].filter(pc.equal(tables[r].column(key), orderkey))
        cancel = gone.append_column("_op", pa.array(["-"] * gone.num_rows)).append_column(
            "_seq", pa.array(range(seq, seq + gone.num_rows), pa.int64())
        )
        seq += gone.num_rows
        loads[r] = pa.concat_tables([loads[r], cancel])
    for r, t in loads.items():
        pq.write_table(t, out / f"{r}.parquet")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
