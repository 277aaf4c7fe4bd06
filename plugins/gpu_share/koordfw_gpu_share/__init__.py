"""koordfw gpu_share: Koordinator fractional GPU scheduling, FGD and the FGD paper's baselines.

Modules: ``requests`` (Koordinator request validation), ``inventory`` (per-node GPU columns),
``api`` (what other packages may import, and the only module they import), ``frag`` (the fragmentation
measure and target workload), ``plugin`` (the scheduler plugin),
``policies`` (the placement policies registered by name: the product's; :class:`Policy`, ``register``),
``baselines`` (the FGD paper's baselines and ``fgdcap``), ``lp`` (fgdlp's configuration packing),
``replay`` (``koordfw replay openb``), ``agent_devices`` (the NVML Device reporter).
"""

from .frag import Workload, node_frag, typical_pods
from .plugin import POLICIES, Args, GpuShare
from .policies import Policy, register
from .requests import GpuRequest, InvalidGpuRequest, normalize_request

__all__ = ["Args", "GpuRequest", "GpuShare", "InvalidGpuRequest", "POLICIES", "Policy", "Workload", "node_frag",
           "normalize_request", "register", "typical_pods"]
