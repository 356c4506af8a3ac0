"""Sizes with SI (powers of 1000) or IEC (powers of 1024) units."""

from __future__ import annotations

import math
import re

from ssbj.errors import ConfigError

_DECIMAL = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(text: str, what: str = "--memory") -> int:
    """Bytes in a size such as ``64MB``, ``1.5GiB``, ``500kB`` or ``1048576``.

    SI prefixes (k, M, G, T, optionally followed by B) are powers of 1000, IEC prefixes
    (Ki, Mi, Gi, Ti, optionally followed by B) powers of 1024; case is ignored.
    """
    m = _SIZE_RE.match(text)
    if m is None:
        raise ConfigError(f"bad {what} value {text!r}: expected a size such as 64MB, 1.5GiB, 500kB or 1048576")
    number, unit = float(m.group(1)), m.group(2).lower()
    if unit != "b" and unit.endswith("b"):
        unit = unit[:-1]
    mult = _DECIMAL.get(unit) or _BINARY.get(unit)
    if mult is None:
        raise ConfigError(
            f"bad {what} value {text!r}: unknown unit {m.group(2)!r} "
            "(use B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024))"
        )
    size = math.floor(number * mult)
    if size < 1:
        raise ConfigError(f"bad {what} value {text!r}: must be at least 1 byte")
    return size


def memory_arg(text: str) -> int | float:
    """``--memory``: bytes (a size such as ``64MB``), or a share of R's projected bytes (``1%`` -> 0.01)."""
    t = text.strip()
    if not t.endswith("%"):
        return parse_size(t)
    try:
        share = float(t[:-1]) / 100.0
    except ValueError:
        share = math.nan
    if not share > 0 or math.isinf(share):
        raise ConfigError(f"bad --memory value {text!r}: a share of R is a number above 0 with %, such as 1% or 10%")
    return share


def memory_bytes(memory: int | float, master_rows: int, v_r: float) -> int:
    """Return the budget in bytes: ``memory`` itself, or its share of R's projected bytes (rows x v_R)."""
    if isinstance(memory, int):
        return memory
    size = math.floor(memory * master_rows * v_r)
    if size < 1:
        raise ConfigError(
            f"--memory {100 * memory:g}% of R ({master_rows:,} rows of {v_r:.1f} B) is less than one byte; raise it"
        )
    return size


def fmt_bytes(n: float) -> str:
    """Format a byte count in decimal units, e.g. ``8.0 MB``."""
    for unit, mult in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= mult:
            return f"{n / mult:.1f} {unit}"
    return f"{n:.0f} B"
