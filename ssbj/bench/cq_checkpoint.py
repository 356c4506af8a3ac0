"""Time the continuous query's full-state checkpoint and restore, and a logged batch's checkpoint, for Q7.

    python -m ssbj.bench.cq_checkpoint 0.1 /tmp/tpch-sf0.1

Loads every tuple of Q7's relations at the scale factor (tpchgen-cli), then writes the
whole state (``ContinuousQuery.state_bytes``, what a full checkpoint writes), restores it,
and writes 10,000 change rows of lineitem as Arrow IPC (what a logged batch writes).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ssbj.bench.datagen import _plain_strings, tpchgen_binary
from ssbj.core.checkpoint import DirectoryStore
from ssbj.cq.maintainer import ContinuousQuery
from ssbj.cq.query import plan_query
from ssbj.cq.schema import parse_schema

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cq"  # run from a checkout


def main() -> None:
    """Generate (or reuse) the data, load it, time the checkpoints, print one line."""
    sf, out = float(sys.argv[1]), Path(sys.argv[2])
    plan = plan_query((EXAMPLES / "q7.sql").read_text(), parse_schema((EXAMPLES / "tpch_schema.sql").read_text()))
    rels = plan.relations()
    if not all((out / f"{r}.parquet").exists() for r in rels):
        out.mkdir(parents=True, exist_ok=True)
        cmd = [tpchgen_binary(), "parquet", "-s", f"{sf:g}", f"--tables={','.join(rels)}", f"--output-dir={out}"]
        subprocess.run([*cmd, "--no-progress", "--quiet"], check=True)  # noqa: S603 - our own generator
    cq = ContinuousQuery(plan)
    batch: dict[str, pa.Table] = {}
    seq = 0
    for r in rels:
        t = _plain_strings(pq.read_table(out / f"{r}.parquet"))
        n = t.num_rows
        batch[r] = t.append_column("_op", pa.array(["+"] * n)).append_column("_seq", pa.array(np.arange(seq, seq + n)))
        seq += n
    t0 = time.perf_counter()
    cq.apply(batch)
    t1 = time.perf_counter()
    store = DirectoryStore(tempfile.mkdtemp(prefix="cq-ck-"))
    blob = cq.state_bytes()
    store.write("full.pickle", blob)
    t2 = time.perf_counter()
    ContinuousQuery.from_state_bytes(plan, store.read("full.pickle"), "full.pickle")
    t3 = time.perf_counter()
    store.write_table("log.arrow", batch["lineitem"].slice(0, 10_000))
    t4 = time.perf_counter()
    print(
        f"SF {sf:g}: {seq:,} tuples loaded in {t1 - t0:.1f} s; full checkpoint {t2 - t1:.2f} s "
        f"({len(blob) / 1e6:.0f} MB), restore {t3 - t2:.2f} s; logged 10k-change batch {1e3 * (t4 - t3):.1f} ms"
    )


if __name__ == "__main__":
    main()
