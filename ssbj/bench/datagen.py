"""Data for the benchmarks: the paper's synthetic Zipf data set (Sec. 4.1) and TPC-H.

The synthetic generator follows the paper: the join values of the master data are drawn
uniformly *with repetition* from the key domain, so some values occur several times
(many-to-many joins) and some never (stream tuples without a match); the stream's join
values follow a Zipf law with exponent ``skew`` (0 = uniform, 1 = strongly skewed) over
the key domain, with the ranks randomly permuted so that hot keys are scattered.
Everything is vectorised NumPy: millions of rows take seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ssbj.errors import ConfigError, DependencyError

__all__ = [
    "SyntheticStream",
    "fixed_payload",
    "generate_synthetic",
    "key_stats",
    "synthetic_master",
    "tpch",
    "tpchgen_binary",
    "zipf_ranks",
]


def zipf_ranks(rng: np.random.Generator, n: int, domain: int, skew: float) -> np.ndarray:
    """``n`` i.i.d. ranks in ``[0, domain)`` with P(rank r) proportional to ``(r + 1) ** -skew``.

    Exact over the finite domain (so exponents <= 1, where the infinite Zipf law does not
    exist, work): multinomial counts per rank, expanded and shuffled, which is O(n +
    domain) and cache-friendly; ``skew == 0`` is the uniform distribution.
    """
    if domain < 1:
        raise ConfigError(f"key domain must be >= 1, got {domain}")
    if skew < 0:
        raise ConfigError(f"skew must be >= 0, got {skew}")
    if skew == 0:
        return rng.integers(0, domain, size=n, dtype=np.int64)
    weights = np.arange(1, domain + 1, dtype=np.float64) ** -skew
    weights /= weights.sum()
    counts = rng.multinomial(n, weights)
    ranks = np.repeat(np.arange(domain, dtype=np.int64), counts)
    rng.shuffle(ranks)
    return ranks


def fixed_payload(rng: np.random.Generator, n: int, nbytes: int) -> pa.Array:
    """``n`` pseudo-random fixed-size binary values of ``nbytes`` bytes (a tuple-size knob).

    The bytes come from a multiplicative hash of the position (cheap and vectorised);
    their content is irrelevant to the join, only their size matters.
    """
    if nbytes < 1:
        raise ConfigError(f"payload size must be >= 1 byte, got {nbytes}")
    words = -(-n * nbytes // 8)
    salt = rng.integers(0, 1 << 62, dtype=np.uint64)
    data = (np.arange(words, dtype=np.uint64) + salt) * np.uint64(0x9E3779B97F4A7C15)
    data ^= data >> np.uint64(29)
    buf = pa.py_buffer(data)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(nbytes), n, [None, buf])


class SyntheticStream:
    """The synthetic stream as an endless sequence of deterministic segments.

    Segment ``i`` holds ``segment_rows`` i.i.d. tuples (``sid`` continues across
    segments); the rank permutation is fixed by ``seed``, so every segment (and every
    consumer, e.g. SSBJ and MESHJOIN in turn) sees the same distribution and the same
    data.  ``drift_after`` (a row number) switches to a second permutation from there on.
    """

    def __init__(
        self,
        n_keys: int,
        skew: float,
        seed: int = 0,
        payload_bytes: int = 16,
        segment_rows: int = 1 << 20,
        drift_after: int | None = None,
    ) -> None:
        if n_keys < 1:
            raise ConfigError(f"n_keys must be >= 1, got {n_keys}")
        if segment_rows < 1:
            raise ConfigError(f"segment_rows must be >= 1, got {segment_rows}")
        if skew < 0:
            raise ConfigError(f"skew must be >= 0, got {skew}")
        self.n_keys = n_keys
        self.skew = skew
        self.seed = seed
        self.payload_bytes = payload_bytes
        self.segment_rows = segment_rows
        self.drift_after = drift_after
        self._perm = np.random.default_rng([seed, 1]).permutation(n_keys).astype(np.int64)
        self._perm2 = (
            np.random.default_rng([seed, 2]).permutation(n_keys).astype(np.int64) if drift_after is not None else None
        )

    @property
    def schema(self) -> pa.Schema:
        """Schema of every segment."""
        return pa.schema([("sid", pa.int64()), ("sk", pa.int64()), ("payload", pa.binary(self.payload_bytes))])

    def table(self, first_row: int, n_rows: int, segment: int) -> pa.Table:
        """``n_rows`` tuples whose ``sid`` starts at ``first_row``, drawn with stream ``segment``."""
        rng = np.random.default_rng([self.seed, 3, segment])
        ranks = zipf_ranks(rng, n_rows, self.n_keys, self.skew)
        sk = self._perm[ranks]
        if self._perm2 is not None and self.drift_after is not None:
            cut = min(max(self.drift_after - first_row, 0), n_rows)
            sk[cut:] = self._perm2[ranks[cut:]]
        return pa.table(
            {
                "sid": pa.array(np.arange(first_row, first_row + n_rows, dtype=np.int64)),
                "sk": pa.array(sk),
                "payload": fixed_payload(rng, n_rows, self.payload_bytes),
            },
            schema=self.schema,
        )

    def segment(self, i: int) -> pa.Table:
        """Segment ``i`` (rows ``i * segment_rows`` to ``(i + 1) * segment_rows - 1``)."""
        return self.table(i * self.segment_rows, self.segment_rows, i)


def synthetic_master(n_master: int, n_keys: int | None = None, seed: int = 0, payload_bytes: int = 16) -> pa.Table:
    """Build the master table R of the synthetic data set (see :func:`generate_synthetic`)."""
    if n_master < 1:
        raise ConfigError(f"n_master must be >= 1, got {n_master}")
    domain = n_master if n_keys is None else n_keys
    if domain < 1:
        raise ConfigError(f"n_keys must be >= 1, got {domain}")
    rng = np.random.default_rng([seed, 0])
    return pa.table(
        {
            "mid": pa.array(np.arange(n_master, dtype=np.int64)),
            "mk": pa.array(rng.integers(0, domain, size=n_master, dtype=np.int64)),
            "attr": pa.array(rng.integers(0, 1 << 31, size=n_master, dtype=np.int64)),
            "mpayload": fixed_payload(rng, n_master, payload_bytes),
        }
    )


def generate_synthetic(
    n_master: int,
    n_stream: int,
    skew: float,
    n_keys: int | None = None,
    seed: int = 0,
    stream_payload_bytes: int = 16,
    master_payload_bytes: int = 16,
    drift_at: float | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Generate the paper's synthetic data set; returns ``(stream, master)``.

    * master: ``mid`` (unique, primary key), ``mk`` (join value, uniform with repetition
      over ``[0, n_keys)``), ``attr``, ``mpayload`` (``master_payload_bytes`` bytes);
    * stream: ``sid``, ``sk`` (join value, Zipf(``skew``) over the key domain with a
      random rank permutation), ``payload`` (``stream_payload_bytes`` bytes).

    ``n_keys`` defaults to ``n_master``: then about 1/e of the domain never occurs in the
    master data (unmatched stream tuples) and many values occur more than once.
    ``drift_at`` (a fraction of the stream) switches to another rank permutation from
    that position on, so the hot set changes mid-stream.
    """
    if n_stream < 0:
        raise ConfigError(f"n_stream must be >= 0, got {n_stream}")
    if drift_at is not None and not 0.0 <= drift_at <= 1.0:
        raise ConfigError(f"drift_at must be a fraction in [0, 1], got {drift_at}")
    master = synthetic_master(n_master, n_keys, seed, master_payload_bytes)
    domain = n_master if n_keys is None else n_keys
    drift_after = None if drift_at is None else round(drift_at * n_stream)
    source = SyntheticStream(
        domain, skew, seed, stream_payload_bytes, segment_rows=max(n_stream, 1), drift_after=drift_after
    )
    return source.table(0, n_stream, 0), master


def tpchgen_binary() -> str:
    """Path of ``tpchgen-cli``: next to the running interpreter (the venv), else on PATH."""
    exe = "tpchgen-cli.exe" if os.name == "nt" else "tpchgen-cli"
    local = Path(sys.executable).parent / exe
    if local.exists():
        return str(local)
    found = shutil.which(exe)
    if found is None:
        raise DependencyError("tpchgen-cli not found; install the bench extra (pip install 'ssbj[bench]')")
    return found


def _plain_strings(table: pa.Table) -> pa.Table:
    """Cast string_view columns (as written by tpchgen-cli) to plain strings."""
    fields = []
    for f in table.schema:
        if pa.types.is_string_view(f.type):
            fields.append(pa.field(f.name, pa.string(), f.nullable))
        elif pa.types.is_binary_view(f.type):
            fields.append(pa.field(f.name, pa.binary(), f.nullable))
        else:
            fields.append(pa.field(f.name, f.type, f.nullable))
    return table.cast(pa.schema(fields)).replace_schema_metadata(None)


def tpch(scale: float, out_dir: str | Path) -> tuple[pa.Table, pa.Table]:
    """TPC-H ``orders`` (the stream) and ``customer`` (the master) at scale factor ``scale``.

    Runs ``tpchgen-cli parquet -s <scale> --tables=customer,orders --output-dir=<out_dir>``
    unless both files already exist there; join ``orders.o_custkey = customer.c_custkey``.
    Returns ``(orders, customer)`` with string_view columns cast to plain strings.
    """
    if scale <= 0:
        raise ConfigError(f"TPC-H scale factor must be > 0, got {scale}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {t: out / f"{t}.parquet" for t in ("orders", "customer")}
    if not all(p.exists() for p in files.values()):
        cmd = [
            tpchgen_binary(),
            "parquet",
            "-s",
            f"{scale:g}",
            "--tables=customer,orders",
            f"--output-dir={out}",
            "--overwrite",
            "--no-progress",
            "--quiet",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
        if proc.returncode != 0:
            raise DependencyError(f"tpchgen-cli failed ({proc.returncode}): {proc.stderr.strip()}")
    orders = _plain_strings(pq.read_table(files["orders"]))
    customer = _plain_strings(pq.read_table(files["customer"]))
    return orders, customer


def key_stats(stream: pa.Table, master: pa.Table, skey: str, mkey: str) -> dict[str, float | int]:
    """Shape of a join: duplicate master values, unmatched stream tuples, top-key share."""
    mvals = np.asarray(master.column(mkey).to_numpy(), dtype=np.int64)
    svals = np.asarray(stream.column(skey).to_numpy(), dtype=np.int64)
    uniq_m, counts_m = np.unique(mvals, return_counts=True)
    uniq_s, counts_s = np.unique(svals, return_counts=True)
    matched = pc.is_in(pa.array(svals), value_set=pa.array(uniq_m)).to_numpy(zero_copy_only=False)
    return {
        "master_rows": len(mvals),
        "master_distinct_keys": len(uniq_m),
        "master_duplicate_rows": int(len(mvals) - len(uniq_m)),
        "master_max_rows_per_key": int(counts_m.max()) if len(counts_m) else 0,
        "stream_rows": len(svals),
        "stream_distinct_keys": len(uniq_s),
        "stream_unmatched_share": float(1.0 - np.mean(matched)) if len(svals) else 0.0,
        "stream_top_key_share": float(counts_s.max() / len(svals)) if len(svals) else 0.0,
    }
