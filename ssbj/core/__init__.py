"""The pure SSBJ / MESHJOIN operator: Arrow in, Arrow out, no Spark, database or Kafka."""

from ssbj.core.bound import Bound, KeyDistribution, key_distribution, memory_optimal_bound
from ssbj.core.costmodel import CostConstants, CostModel, MemoryPlan, StepCost, calibrate, plan_memory
from ssbj.core.master import ArrowMaster, MasterScan
from ssbj.core.metrics import MemoryReport, StepMetrics
from ssbj.core.operator import JoinSpec, SemiStreamJoin, StepResult

__all__ = [
    "ArrowMaster",
    "Bound",
    "CostConstants",
    "CostModel",
    "JoinSpec",
    "KeyDistribution",
    "MasterScan",
    "MemoryPlan",
    "MemoryReport",
    "SemiStreamJoin",
    "StepCost",
    "StepMetrics",
    "StepResult",
    "calibrate",
    "key_distribution",
    "memory_optimal_bound",
    "plan_memory",
]
