"""koordfw defrag: a descheduler (Koordinator's LowNodeLoad) plus GPU and CPU defragmentation by migration.

Modules: ``args`` (the plugin's config), ``planner`` (:func:`plan`, the pure planning function engines
call), ``low_node_load``, ``gpu_defrag``, ``cpu_defrag``, ``fragengine`` (the greedy descent),
``plan`` (reservations, budgets, PDBs, gangs), ``safety`` (the evictor filter), ``cli``
(``koordfw deschedule``).
"""

from .args import Args, CpuDefragArgs, GpuDefragArgs, LowNodeLoadArgs
from .low_node_load import AnomalyTracker
from .plan import PlanResult
from .planner import plan

__all__ = ["AnomalyTracker", "Args", "CpuDefragArgs", "GpuDefragArgs", "LowNodeLoadArgs", "PlanResult", "plan"]
