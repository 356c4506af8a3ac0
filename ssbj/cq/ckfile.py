"""A continuous query's checkpoint file: a pickle of the state, zstd-compressed, behind a magic header.

Format 3 (this module) is ``MAGIC | raw length (8 bytes, little-endian) | zstd(pickle)``;
the pickle holds ``kind`` (``full`` or ``increment``), the query's fingerprint, the chain
(a full checkpoint's random token and the number of increments on top of it) and the
state or the rows that changed.  Formats 1 and 2 were the bare pickle; they are still
read (a pickle's first byte is never the magic's).  zstd comes with pyarrow (no new
dependency); compressing costs about what writing the uncompressed bytes did and makes
the file ~6x smaller (bench/results/cq.md).
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

import pyarrow as pa

from ssbj.errors import CheckpointError

MAGIC = b"SSBJCQ3\n"
FORMAT = 3
OLD_FORMATS = (1, 2)
_CODEC = pa.Codec("zstd", compression_level=1)


def pack(data: dict[str, Any]) -> bytes:
    """Serialise ``data`` (numpy arrays as raw buffers) and compress it."""
    raw = pickle.dumps({**data, "format": FORMAT}, protocol=5)
    packed: bytes = _CODEC.compress(raw, asbytes=True)
    return MAGIC + struct.pack("<Q", len(raw)) + packed


def unpack(blob: bytes, where: str) -> dict[str, Any]:
    """Invert :func:`pack`; a format 1 or 2 file (a bare pickle) is read as it is."""
    if blob[: len(MAGIC)] == MAGIC:
        (n,) = struct.unpack("<Q", blob[len(MAGIC) : len(MAGIC) + 8])
        try:
            raw = _CODEC.decompress(blob[len(MAGIC) + 8 :], decompressed_size=n, asbytes=True)
        except (OSError, pa.ArrowInvalid) as exc:
            raise CheckpointError(f"{where} is damaged: {exc}") from exc
    else:
        raw = blob
    try:
        # written by this package for the query the manifest names (its fingerprint is checked): not foreign input
        data: dict[str, Any] = pickle.loads(raw)  # noqa: S301
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise CheckpointError(f"{where} is not a continuous query checkpoint: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") not in (*OLD_FORMATS, FORMAT):
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise CheckpointError(f"{where} has format {got}; this version reads formats 1-{FORMAT}")
    return data
