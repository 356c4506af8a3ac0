"""Time the continuous query's checkpoints for Q7: full state, increments, restore, and the change log.

    python -m ssbj.bench.cq_checkpoint 0.1 /tmp/tpch-sf0.1 [BATCHES]

Loads every tuple of Q7's relations at the scale factor (tpchgen-cli; one batch, in the
random interleaving of :func:`ssbj.bench.exp_cq.build_stream`), writes the whole state
(``ContinuousQuery.state_bytes``: zstd-compressed, format 3) and restores it; then takes
BATCHES (default 20) update batches of 10,000 changes, writing after each the increment
(``increment_bytes``: the hash rows and tuple slots the batch wrote) and, for comparison,
the batch's change rows as Arrow IPC (the log the dict engine writes); finally restores
base + increments and checks the state equals the running engine's.  Prints one line
per measurement and a JSON summary.
"""

from __future__ import annotations

import json
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ssbj.bench.exp_cq import EXAMPLES, build_stream, tpch_q7_data
from ssbj.core.checkpoint import DirectoryStore
from ssbj.cq import ckfile
from ssbj.cq.maintainer import ContinuousQuery
from ssbj.cq.query import plan_query
from ssbj.cq.schema import parse_schema

BATCH = 10_000


def _raw_size(blob: bytes) -> int:
    """Uncompressed size of a format 3 file (its header says)."""
    return int(struct.unpack("<Q", blob[len(ckfile.MAGIC) : len(ckfile.MAGIC) + 8])[0])


def main() -> None:
    """Generate (or reuse) the data, load it, time the checkpoints, print the figures."""
    sf, out = float(sys.argv[1]), Path(sys.argv[2])
    batches = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    plan = plan_query((EXAMPLES / "q7.sql").read_text(), parse_schema((EXAMPLES / "tpch_schema.sql").read_text()))
    data = tpch_q7_data(sf, out)
    stream, n_load = build_stream(data, BATCH * batches, np.random.default_rng(0))
    cq = ContinuousQuery(plan)
    t0 = time.perf_counter()
    cq.apply(stream.frames(0, n_load))
    t_load = time.perf_counter() - t0
    store = DirectoryStore(tempfile.mkdtemp(prefix="cq-ck-"))
    t0, c0 = time.perf_counter(), time.process_time()
    base = cq.state_bytes()
    store.write("full.cq", base)
    cq.checkpoint_committed()
    t_full, c_full = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    ContinuousQuery.from_state_bytes(plan, store.read("full.cq"), "full.cq")
    t_restore, c_restore = time.perf_counter() - t0, time.process_time() - c0
    res = {
        "scale_factor": sf,
        "tuples": n_load,
        "load_seconds": t_load,
        "state_nbytes": cq.nbytes(),
        "full": {
            "write_seconds": t_full,
            "write_cpu_seconds": c_full,
            "bytes": len(base),
            "raw_bytes": _raw_size(base),
            "restore_seconds": t_restore,
            "restore_cpu_seconds": c_restore,
        },
    }
    print(
        f"SF {sf:g}: {n_load:,} tuples loaded in {t_load:.1f} s; full checkpoint {t_full:.2f} s (CPU {c_full:.2f} s), "
        f"{len(base) / 1e6:.1f} MB ({_raw_size(base) / 1e6:.0f} MB uncompressed), "
        f"restore {t_restore:.2f} s (CPU {c_restore:.2f} s)",
        flush=True,
    )
    inc_w, inc_c, inc_b, inc_raw, log_w, log_b, dirty = [], [], [], [], [], [], []
    pos = n_load
    for k in range(batches):
        frames = stream.frames(pos, pos + BATCH)
        pos += BATCH
        cq.apply(frames)
        dirty.append(cq.dirty_fraction())
        t0, c0 = time.perf_counter(), time.process_time()
        blob = cq.increment_bytes()
        store.write(f"inc-{k}.cq", blob)
        cq.checkpoint_committed()
        inc_w.append(time.perf_counter() - t0)
        inc_c.append(time.process_time() - c0)
        inc_b.append(len(blob))
        inc_raw.append(_raw_size(blob))
        t0 = time.perf_counter()
        for rel, table in frames.items():
            store.write_table(f"log-{k}-{rel}.arrow", table)
        log_w.append(time.perf_counter() - t0)
        log_b.append(sum((store.path / f"log-{k}-{rel}.arrow").stat().st_size for rel in frames))
    t0 = time.perf_counter()
    back = ContinuousQuery.from_state_bytes(plan, store.read("full.cq"), "full.cq")
    for k in range(batches):
        back.apply_increment_bytes(store.read(f"inc-{k}.cq"), f"inc-{k}.cq")
    t_chain = time.perf_counter() - t0
    exact = back.state() == cq.state()
    res["increments"] = {
        "batch_changes": BATCH,
        "batches": batches,
        "write_seconds_median": float(np.median(inc_w)),
        "write_cpu_seconds_median": float(np.median(inc_c)),
        "bytes_median": float(np.median(inc_b)),
        "raw_bytes_median": float(np.median(inc_raw)),
        "dirty_fraction_median": float(np.median(dirty)),
        "restore_base_plus_all_seconds": t_chain,
        "restore_exact": exact,
    }
    res["change_log"] = {"write_seconds_median": float(np.median(log_w)), "bytes_median": float(np.median(log_b))}
    print(
        f"SF {sf:g}: increment per {BATCH:,}-change batch {1e3 * np.median(inc_w):.0f} ms "
        f"(CPU {1e3 * np.median(inc_c):.0f} ms), "
        f"{np.median(inc_b) / 1e6:.2f} MB ({np.median(inc_raw) / 1e6:.1f} MB uncompressed, "
        f"dirty {100 * np.median(dirty):.1f}% of the state); change log {1e3 * np.median(log_w):.0f} ms, "
        f"{np.median(log_b) / 1e6:.2f} MB; restore base + {batches} increments {t_chain:.2f} s, exact: {exact}",
        flush=True,
    )
    print(json.dumps(res))


if __name__ == "__main__":
    main()
