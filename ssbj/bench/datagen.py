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

from ssbj.errors import ConfigError

__all__ = ["fixed_payload", "generate_synthetic", "key_stats", "tpch", "tpchgen_binary", "zipf_ranks"]


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
    """The paper's synthetic data set; returns ``(stream, master)``.

    * master: ``mid`` (unique, primary key), ``mk`` (join value, uniform with repetition
      over ``[0, n_keys)``), ``attr``, ``mpayload`` (``master_payload_bytes`` bytes);
    * stream: ``sid``, ``sk`` (join value, Zipf(``skew``) over the key domain with a
      random rank permutation), ``payload`` (``stream_payload_bytes`` bytes).

    ``n_keys`` defaults to ``n_master``: then about 1/e of the domain never occurs in the
    master data (unmatched stream tuples) and many values occur more than once.
    ``drift_at`` (a fraction of the stream) switches to another rank permutation from
    that position on, so the hot set changes mid-stream.
    """
    if n_master < 1 or n_stream < 0:
        raise ConfigError(f"need n_master >= 1 and n_stream >= 0, got {n_master}, {n_stream}")
    domain = n_master if n_keys is None else n_keys
    if domain < 1:
        raise ConfigError(f"n_keys must be >= 1, got {domain}")
    if drift_at is not None and not 0.0 <= drift_at <= 1.0:
        raise ConfigError(f"drift_at must be a fraction in [0, 1], got {drift_at}")
    rng = np.random.default_rng(seed)

    mk = rng.integers(0, domain, size=n_master, dtype=np.int64)
    master = pa.table(
        {
            "mid": pa.array(np.arange(n_master, dtype=np.int64)),
            "mk": pa.array(mk),
            "attr": pa.array(rng.integers(0, 1 << 31, size=n_master, dtype=np.int64)),
            "mpayload": fixed_payload(rng, n_master, master_payload_bytes),
        }
    )

    ranks = zipf_ranks(rng, n_stream, domain, skew)
    perm = rng.permutation(domain).astype(np.int64)
    sk = perm[ranks]
    if drift_at is not None:
        cut = int(round(drift_at * n_stream))
        perm2 = rng.permutation(domain).astype(np.int64)
        sk[cut:] = perm2[ranks[cut:]]
    stream = pa.table(
        {
            "sid": pa.array(np.arange(n_stream, dtype=np.int64)),
            "sk": pa.array(sk),
            "payload": fixed_payload(rng, n_stream, stream_payload_bytes),
        }
    )
    return stream, master


def tpchgen_binary() -> str:
    """Path of ``tpchgen-cli``: next to the running interpreter (the venv), else on PATH."""
    exe = "tpchgen-cli.exe" if os.name == "nt" else "tpchgen-cli"
    local = Path(sys.executable).parent / exe
    if local.exists():
        return str(local)
    found = shutil.which(exe)
    if found is None:
        raise ConfigError("tpchgen-cli not found; install the bench extra (pip install 'ssbj[bench]')")
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
            tpchgen_binary(), "parquet", "-s", f"{scale:g}", "--tables=customer,orders",
            f"--output-dir={out}", "--overwrite", "--no-progress", "--quiet",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
        if proc.returncode != 0:
            raise ConfigError(f"tpchgen-cli failed ({proc.returncode}): {proc.stderr.strip()}")
    orders = _plain_strings(pq.read_table(files["orders"]))
    customer = _plain_strings(pq.read_table(files["customer"]))
    return orders, customer


def key_stats(stream: pa.Table, master: pa.Table, skey: str, mkey: str) -> dict[str, float]:
    """Shape of a join: duplicate master values, unmatched stream tuples, top-key share."""
    mvals = np.asarray(master.column(mkey).to_numpy(), dtype=np.int64)
    svals = np.asarray(stream.column(skey).to_numpy(), dtype=np.int64)
    uniq_m, counts_m = np.unique(mvals, return_counts=True)
    uniq_s, counts_s = np.unique(svals, return_counts=True)
    matched = pc.is_in(pa.array(svals), value_set=pa.array(uniq_m)).to_numpy(zero_copy_only=False)
    return {
        "master_rows": int(len(mvals)),
        "master_distinct_keys": int(len(uniq_m)),
        "master_duplicate_rows": int(len(mvals) - len(uniq_m)),
        "master_max_rows_per_key": int(counts_m.max()) if len(counts_m) else 0,
        "stream_rows": int(len(svals)),
        "stream_distinct_keys": int(len(uniq_s)),
        "stream_unmatched_share": float(1.0 - np.mean(matched)) if len(svals) else 0.0,
        "stream_top_key_share": float(counts_s.max() / len(svals)) if len(svals) else 0.0,
    }
