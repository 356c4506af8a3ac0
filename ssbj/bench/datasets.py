"""Benchmark data sets: a master table R and a deterministic stream over it, generated segment by segment."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa

from ssbj.bench.datagen import SyntheticStream, key_stats, synthetic_master, tpch
from ssbj.bench.presets import Json, Preset
from ssbj.core.rowsize import row_nbytes


class Dataset:
    """A master table R and a deterministic, segment-wise generated stream over it."""

    def __init__(
        self,
        name: str,
        master: pa.Table,
        stream_schema: pa.Schema,
        make_segment: Callable[[int], pa.Table],
        stream_key: str,
        master_key: str,
        master_columns: tuple[str, ...],
        info: Json | None = None,
    ) -> None:
        self.name = name
        self.master = master
        self.stream_schema = stream_schema
        self.stream_key = stream_key
        self.master_key = master_key
        self.master_columns = master_columns
        self._make = make_segment
        self._segments: list[pa.Table] = []
        proj = master.select([master_key, *[c for c in master_columns if c != master_key]])
        self.r_rows = master.num_rows
        self.r_bytes = int(proj.nbytes)  # projected R: what the disk buffer and H_R hold
        self.v_r = self.r_bytes / max(1, self.r_rows)
        first = self.segment(0)
        self.v_s = float(row_nbytes(first).mean()) if first.num_rows else 1.0
        self.info: Json = {
            "name": name,
            "r_rows": self.r_rows,
            "r_projected_bytes": self.r_bytes,
            "v_r": round(self.v_r, 2),
            "v_s": round(self.v_s, 2),
            **(info or {}),
        }

    def segment(self, i: int) -> pa.Table:
        """Stream segment ``i``, generated once and kept (all runs see the same data)."""
        while len(self._segments) <= i:
            self._segments.append(self._make(len(self._segments)))
        return self._segments[i]

    def rows(self, n: int) -> pa.Table:
        """Return the first ``n`` stream tuples."""
        parts: list[pa.Table] = []
        have = 0
        i = 0
        while have < n:
            seg = self.segment(i)
            if seg.num_rows == 0:
                break
            take = min(seg.num_rows, n - have)
            parts.append(seg.slice(0, take))
            have += take
            i += 1
        return pa.concat_tables(parts).combine_chunks() if parts else self.stream_schema.empty_table()

    def batches(self, rows: int, max_rows: int) -> Iterator[pa.RecordBatch]:
        """Yield the stream as record batches of ``rows`` tuples, at most ``max_rows`` in all."""
        sent = 0
        i = 0
        while sent < max_rows:
            seg = self.segment(i)
            if seg.num_rows == 0:
                return
            for b in seg.to_batches(max_chunksize=rows):
                if sent >= max_rows:
                    return
                yield b
                sent += b.num_rows
            i += 1


def synthetic_dataset(p: Preset, n_master: int, skew: float, seed: int) -> Dataset:
    """Build the paper's synthetic data set at |R| = ``n_master``."""
    master = synthetic_master(n_master, seed=seed, payload_bytes=p.master_payload)
    src = SyntheticStream(n_master, skew, seed=seed, payload_bytes=p.stream_payload, segment_rows=p.segment_rows)
    ds = Dataset(
        f"synthetic(R={n_master}, skew={skew:g})",
        master,
        src.schema,
        src.segment,
        "sk",
        "mk",
        ("attr", "mpayload"),
        {"skew": skew, "seed": seed},
    )
    sample = ds.segment(0)
    ds.info["keys"] = key_stats(sample, master, "sk", "mk")
    return ds


def tpch_dataset(p: Preset, work_dir: Path) -> Dataset:
    """TPC-H orders (stream, repeated as often as needed) joined with customer (master)."""
    orders, customer = tpch(p.tpch_scale, work_dir / f"tpch-sf{p.tpch_scale:g}")
    cols = tuple(c for c in customer.column_names if c != "c_custkey")

    def seg(_i: int) -> pa.Table:
        return orders

    ds = Dataset(
        f"tpch(sf={p.tpch_scale:g})",
        customer,
        orders.schema,
        seg,
        "o_custkey",
        "c_custkey",
        cols,
        {"scale": p.tpch_scale, "orders_rows": orders.num_rows},
    )
    ds.info["keys"] = key_stats(orders, customer, "o_custkey", "c_custkey")
    return ds
