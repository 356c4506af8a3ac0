"""The methods of the benchmark, in report order: one module each, adding a method is one line here."""

from __future__ import annotations

import importlib

from ssbj.bench.pipeline.harness import Method

MODULES = {
    "ssbj": "m_ssbj",
    "ssbj_index": "m_ssbj_index",
    "ssbj_index_ttl": "m_ssbj_index_ttl",
    "ssbj_exec": "m_ssbj_exec",
    "ssbj_exec_read": "m_ssbj_exec_read",
    "meshjoin": "m_meshjoin",
    "lookup_lru": "m_lookup_lru",
    "lookup_lru_in": "m_lookup_lru_in",
    "spark_static": "m_spark_static",
}
METHODS = tuple(MODULES)


def method(name: str) -> Method:
    """Return the ``METHOD`` of module ``m_<name>``."""
    mod = importlib.import_module(f"ssbj.bench.pipeline.{MODULES[name]}")
    m: Method = mod.METHOD
    if m.name != name:
        raise RuntimeError(f"module {mod.__name__} holds method {m.name!r}, registered as {name!r}")
    return m


def labels() -> dict[str, str]:
    """Return method name -> label."""
    return {n: method(n).label for n in METHODS}
