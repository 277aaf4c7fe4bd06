# TEMP during the kernel split: the old module name
from .runtime import *  # noqa: F401,F403
from .runtime import num_feasible_nodes_to_find, Scheduler, CycleState, Handle, PostFilterResult, PreFilterResult, WaitingPod, PodResult, NodeStatuses  # noqa: F401
