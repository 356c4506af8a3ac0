"""ssbj: semi-stream enrichment with SSBJ and MESHJOIN.

``ssbj.enrich`` joins Arrow data in one call; the operator (``SemiStreamJoin``), its
settings and planning, the typed counters and the error tree are exported here too.
"""

from ssbj.api import enrich
from ssbj.contracts import MasterScan, OperatorTotals, RunCounts, WarehouseSink, reconciles
from ssbj.core import ArrowMaster, CostModel, JoinSpec, SemiStreamJoin, StepResult
from ssbj.errors import (
    CheckpointError,
    ConfigError,
    DependencyError,
    InputError,
    ServiceError,
    SSBJError,
    StateError,
    TerminalError,
    TransientError,
)
from ssbj.planning import DEFAULT_MEMORY, JoinPlan, JoinSettings, estimate_row_bytes, plan_join

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MEMORY",
    "ArrowMaster",
    "CheckpointError",
    "ConfigError",
    "CostModel",
    "DependencyError",
    "InputError",
    "JoinPlan",
    "JoinSettings",
    "JoinSpec",
    "MasterScan",
    "OperatorTotals",
    "RunCounts",
    "SSBJError",
    "SemiStreamJoin",
    "ServiceError",
    "StateError",
    "StepResult",
    "TerminalError",
    "TransientError",
    "WarehouseSink",
    "enrich",
    "estimate_row_bytes",
    "plan_join",
    "reconciles",
]
