"""Koordinator's GPU request model: validation and normalisation of a pod's GPU resources.

Follows ``pkg/scheduler/plugins/deviceshare`` (``ValidateDeviceRequest``, ``ConvertDeviceRequest``,
``calcDesiredRequestsAndCountForGPU``): the non-zero GPU resources of a pod form a combination that must
be one of Koordinator's valid ones; it is mapped to ``gpu-core`` / ``gpu-memory-ratio`` / ``gpu-memory``
and split into a per-GPU request and a GPU count.

Internally per-GPU amounts are in **milli** of a device (1000 = one whole GPU), i.e. Koordinator's
percentages × 10, which is the unit of the FGD paper's traces and formulas.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from koordfw.extension import (
    RESOURCE_GPU,
    RESOURCE_GPU_CORE,
    RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO,
    RESOURCE_GPU_SHARED,
)

NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
HYGON_DCU = "dcu.com/gpu"
HUAWEI_NPU_CORE = "huawei.com/npu-core"
GPU_MODEL_LABEL = "node.koordinator.sh/gpu-model"

GPU_RESOURCES = (NVIDIA_GPU, AMD_GPU, HYGON_DCU, RESOURCE_GPU, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY,
                 RESOURCE_GPU_MEMORY_RATIO, RESOURCE_GPU_SHARED, HUAWEI_NPU_CORE)

# Koordinator's valid combinations (apis/extension/device_share.go), as sets of resource names.
_WHOLE = ({NVIDIA_GPU}, {AMD_GPU}, {HYGON_DCU})
_PERCENT = ({RESOURCE_GPU}, {RESOURCE_GPU_MEMORY_RATIO}, {RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY_RATIO})
_OTHER = ({RESOURCE_GPU_MEMORY}, {RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY})
_SHARED = ({RESOURCE_GPU_SHARED, RESOURCE_GPU_MEMORY}, {RESOURCE_GPU_SHARED, RESOURCE_GPU_MEMORY_RATIO},
           {RESOURCE_GPU_SHARED, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY},
           {RESOURCE_GPU_SHARED, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY_RATIO})
_HUAWEI = ({HUAWEI_NPU_CORE, RESOURCE_GPU_MEMORY_RATIO},)
VALID_COMBINATIONS = tuple(frozenset(c) for c in _WHOLE + _PERCENT + _OTHER + _SHARED + _HUAWEI)


class InvalidGpuRequest(ValueError):
    """The pod's GPU resources are not a combination or amount Koordinator accepts."""


@attrs.frozen
class GpuRequest:
    """A normalised GPU request: ``count`` devices, each giving ``core`` and ``memory_ratio`` (milli of a
    device) or, when only bytes were asked, ``memory_bytes`` per device.

    ``shared`` is Koordinator's notion (less than a whole device's memory); ``spec`` the allowed GPU
    models joined by ``|`` (empty = any), from the pod's node affinity / node selector.
    """

    count: int
    core: int = 0
    memory_ratio: int | None = None
    memory_bytes: int | None = None
    shared: bool = False
    spec: str = ""

    @property
    def milli(self) -> int:
        """The per-GPU amount in the FGD paper's one-dimensional sense (the larger of core and memory)."""
        return max(self.core, self.memory_ratio or 0)

    @property
    def total_milli(self) -> int:
        return self.milli * self.count

    @property
    def canonical(self) -> dict[str, int]:
        """Per-GPU request in Koordinator's units (percent, bytes)."""
        out = {RESOURCE_GPU_CORE: self.core // 10}
        if self.memory_ratio is not None:
            out[RESOURCE_GPU_MEMORY_RATIO] = self.memory_ratio // 10
        if self.memory_bytes is not None:
            out[RESOURCE_GPU_MEMORY] = self.memory_bytes
        return out


def _pct_check(name: str, value: int) -> None:
    if value > 100 and value % 100 != 0:
        raise InvalidGpuRequest(f"{name}={value}: a percentage above 100 must be a multiple of 100")


def normalize_request(requests: Mapping[str, int], spec: str = "") -> GpuRequest | None:
    """Validate and normalise a pod's requests; ``None`` when the pod asks for no GPU.

    ``requests`` holds canonical integers (units: percentages, counts, bytes). Raises
    :class:`InvalidGpuRequest` with Koordinator's reason for an invalid combination or amount.
    """
    present = {r: int(requests[r]) for r in GPU_RESOURCES if int(requests.get(r, 0) or 0) != 0}
    if not present:
        return None
    for r, v in present.items():
        if v < 0:
            raise InvalidGpuRequest(f"{r}={v}: must not be negative")
    combo = frozenset(present)
    if combo not in VALID_COMBINATIONS:
        raise InvalidGpuRequest(f"invalid gpu request combination {sorted(combo)}")
    if HUAWEI_NPU_CORE in combo:
        raise InvalidGpuRequest(f"{HUAWEI_NPU_CORE} requests are Huawei NPU devices, not handled by gpu_share")
    shared = present.get(RESOURCE_GPU_SHARED, 0)
    core = present.get(RESOURCE_GPU_CORE)
    ratio = present.get(RESOURCE_GPU_MEMORY_RATIO)
    mem = present.get(RESOURCE_GPU_MEMORY)
    # step 2: canonical form
    for whole in (NVIDIA_GPU, AMD_GPU, HYGON_DCU):
        if whole in present:
            core = ratio = 100 * present[whole]
    if RESOURCE_GPU in present:
        _pct_check(RESOURCE_GPU, present[RESOURCE_GPU])
        core = ratio = present[RESOURCE_GPU]
    if shared:
        for name, pct in ((RESOURCE_GPU_CORE, core), (RESOURCE_GPU_MEMORY_RATIO, ratio)):
            if pct is not None and pct % shared != 0:
                raise InvalidGpuRequest(f"{name}={pct} must be a multiple of {RESOURCE_GPU_SHARED}={shared}")
        if core is not None and core // shared > 100:
            raise InvalidGpuRequest(f"{RESOURCE_GPU_CORE}={core} over {RESOURCE_GPU_SHARED}={shared} exceeds 100 per GPU")
    elif combo in (frozenset({RESOURCE_GPU_MEMORY_RATIO}), frozenset({RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY_RATIO})):
        for name, pct in ((RESOURCE_GPU_CORE, core), (RESOURCE_GPU_MEMORY_RATIO, ratio)):
            if pct is not None:
                _pct_check(name, pct)
    # step 3: per-GPU request and count
    count = 1
    if shared > 0:
        count = shared
    elif ratio is not None and ratio > 100 and ratio % 100 == 0:
        count = ratio // 100
    per_core = (core or 0) // count
    per_ratio = ratio // count if ratio is not None else None
    per_mem = mem // count if (mem is not None and ratio is None) else None
    is_shared = (per_ratio is not None and per_ratio < 100) or (mem is not None and ratio is None)
    return GpuRequest(count=count, core=per_core * 10, memory_ratio=per_ratio * 10 if per_ratio is not None else None,
                      memory_bytes=per_mem, shared=is_shared, spec=spec)


def gpu_model_spec(pod: Any) -> str:
    """The GPU models a pod accepts, from ``nodeSelector`` or a required node-affinity ``In`` term on
    ``node.koordinator.sh/gpu-model``; joined by ``|`` (the trace's ``gpu_spec`` format), empty = any.

    A malformed affinity raises :class:`InvalidGpuRequest` naming the field (the loader checks
    manifests, but a pod can also come from an embedder or a live cluster)."""
    sel = pod.node_selector or {}
    if not isinstance(sel, Mapping):
        raise InvalidGpuRequest("spec.nodeSelector: expected a mapping")
    if sel.get(GPU_MODEL_LABEL):
        return str(sel[GPU_MODEL_LABEL])
    where = "spec.affinity"
    aff = pod.affinity or {}
    if not isinstance(aff, Mapping):
        raise InvalidGpuRequest(f"{where}: expected a mapping")
    na = aff.get("nodeAffinity") or {}
    where += ".nodeAffinity"
    if not isinstance(na, Mapping):
        raise InvalidGpuRequest(f"{where}: expected a mapping")
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    where += ".requiredDuringSchedulingIgnoredDuringExecution"
    if not isinstance(req, Mapping):
        raise InvalidGpuRequest(f"{where}: expected a mapping")
    terms = req.get("nodeSelectorTerms") or []
    if not isinstance(terms, list):
        raise InvalidGpuRequest(f"{where}.nodeSelectorTerms: expected a list")
    models: list[str] = []
    for i, term in enumerate(terms):
        tw = f"{where}.nodeSelectorTerms[{i}]"
        if not isinstance(term, Mapping):
            raise InvalidGpuRequest(f"{tw}: expected a mapping")
        exprs = term.get("matchExpressions") or []
        if not isinstance(exprs, list):
            raise InvalidGpuRequest(f"{tw}.matchExpressions: expected a list")
        for j, e in enumerate(exprs):
            ew = f"{tw}.matchExpressions[{j}]"
            if not isinstance(e, Mapping):
                raise InvalidGpuRequest(f"{ew}: expected a mapping")
            if e.get("key") == GPU_MODEL_LABEL and e.get("operator", "In") == "In":
                values = e.get("values") or []
                if not isinstance(values, list):
                    raise InvalidGpuRequest(f"{ew}.values: expected a list")
                models.extend(str(v) for v in values)
    return "|".join(dict.fromkeys(models))


def pod_gpu_request(pod: Any) -> GpuRequest | None:
    """:func:`normalize_request` for a :class:`koordfw.Pod`; errors name the pod."""
    try:
        return normalize_request(pod.requests, gpu_model_spec(pod))
    except InvalidGpuRequest as e:
        raise InvalidGpuRequest(f"pod {pod.namespace}/{pod.name}: {e}") from None


def pod_key(pod: Any) -> tuple[int, int, int, str]:
    """The pod's typical-pod key for the FGD target workload: ``(cpu milli, per-GPU milli, GPU count,
    model spec)``, zeros and '' without a GPU request. Raises :class:`InvalidGpuRequest`."""
    req = pod_gpu_request(pod)
    return (int(pod.requests.get("cpu", 0)), req.milli if req else 0, req.count if req else 0,
            req.spec if req else "")
