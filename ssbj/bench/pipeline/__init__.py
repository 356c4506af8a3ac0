"""End-to-end pipeline benchmark: Kafka (Tansu) -> Spark -> enrichment -> MariaDB warehouse.

Run ``python -m ssbj.bench.pipeline --scale small --out bench/pipeline``.  One harness
(:mod:`.harness`: services from :mod:`ssbj.testing`, data, DB counters, RSS, staleness,
timeline, checks) and one module per method (``m_*.py``, listed in :mod:`.registry`);
:mod:`.report` writes ``results.json`` and ``README.md``.
"""
