"""koordfw_cpu_topology: NUMA-aware CPU binding for LSE/LSR pods (Koordinator's fine-grained CPU
orchestration), from the scheduler's choice of exact CPUs to the node's cpuset cgroups.

* :mod:`.accumulator`: Koordinator's ``takeCPUs`` / ``takePreferredCPUs``.
* :mod:`.plugin`: the scheduler plugin (entry point ``cpu_topology``).
* :mod:`.agent`: the node-agent plugin writing cpuset cgroups (entry point ``cpu_topology_agent``).
"""

from .accumulator import AllocatedCPU, CPUAllocationError, take_cpus, take_preferred_cpus
from .cpuset import format_cpuset, parse_cpuset
from .state import NodeAllocation, allocate_cpuset
from .topology import CPUTopology, build_cpu_topology_for_test, parse_cpu_topology

__all__ = ["AllocatedCPU", "CPUAllocationError", "CPUTopology", "NodeAllocation", "allocate_cpuset",
           "build_cpu_topology_for_test", "format_cpuset", "parse_cpu_topology", "parse_cpuset", "take_cpus",
           "take_preferred_cpus"]
