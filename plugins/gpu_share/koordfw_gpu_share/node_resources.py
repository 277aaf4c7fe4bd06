"""Device resources of a node from its Koordinator ``Device`` (slo-controller's ``gpudeviceresource`` plugin).

For the node's Device (``scheduling.koordinator.sh/v1alpha1``, named like the node): the sum, over the
devices of type ``gpu`` whose ``health`` is true, of every resource each lists (``koordinator.sh/gpu-core``,
``gpu-memory``, ``gpu-memory-ratio``, ...), plus ``koordinator.sh/gpu`` = the sum of ``gpu-core`` when the
Device's ``node.koordinator.sh/gpu-vendor`` label is empty or ``nvidia``. No Device, or no healthy GPU,
resets (removes) every resource of :data:`RESOURCE_NAMES`; a resource of that list the sum lacks is left
as the node has it. ``gpu.shared`` is not published (Koordinator's ``EnableSyncGPUSharedResource`` gate
is off by default). The GPU labels Koordinator copies from the Device onto the node are not written.

When the colocation configuration disables colocation for the node, nothing is written (Koordinator
resets only the batch resources then; this plugin's Reset is empty). Writes follow the sync rule of
the batch resources: ``updateTimeThresholdSeconds`` and ``resourceDiffThreshold`` of the node's strategy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from koordfw import BoundedCache, ManifestError, warn_once
from koordfw.extension import (
    ANNOTATION_NODE_COLOCATION_STRATEGY,
    GPU_VENDOR_NVIDIA,
    LABEL_GPU_VENDOR,
    RESOURCE_GPU,
    RESOURCE_GPU_CORE,
    RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO,
    RESOURCE_GPU_SHARED,
    RESOURCE_HUAWEI_NPU_CORE,
    RESOURCE_HUAWEI_NPU_CPU,
    RESOURCE_HUAWEI_NPU_DVPP,
)
from koordfw.inputs import field_list, field_mapping, loads_json, resource_map, selector_matches

log = structlog.get_logger("koordfw.gpu_share")

#: the resources the plugin reconciles from Devices to nodes (gpudeviceresource's ResourceNames)
RESOURCE_NAMES = (RESOURCE_GPU, RESOURCE_GPU_CORE, RESOURCE_HUAWEI_NPU_CORE, RESOURCE_HUAWEI_NPU_CPU,
                  RESOURCE_HUAWEI_NPU_DVPP, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO, RESOURCE_GPU_SHARED)

#: Koordinator's AnnotationNodeColocationStrategy (the batch_resource plugin reads it too)
_ANNOTATION_COLOCATION_STRATEGY = ANNOTATION_NODE_COLOCATION_STRATEGY
#: the fields of Koordinator's default ColocationStrategy this plugin reads
_DEFAULTS: dict[str, Any] = {"enable": False, "updateTimeThresholdSeconds": 300, "resourceDiffThreshold": 0.1}


def node_strategy(colocation: Mapping[str, Any], labels: Mapping[str, str], annotations: Mapping[str, str],
                  ) -> dict[str, Any]:
    """``enable``, ``updateTimeThresholdSeconds`` and ``resourceDiffThreshold`` of one node, as
    ``GetNodeColocationStrategy``: the cluster's, then the first matching ``nodeConfigs`` entry's, then the
    node's annotation; ``enable`` is false whenever the cluster's is (``isColocationCfgDisabled``)."""
    def pick(src: Any) -> dict[str, Any]:
        if not isinstance(src, Mapping):
            return {}
        return {k: v for k, v in src.items() if k in _DEFAULTS and isinstance(v, (int, float))
                and (k != "enable" or isinstance(v, bool))}

    s = {**_DEFAULTS, **pick(colocation)}
    cluster_enabled = bool(s["enable"])
    for nc in colocation.get("nodeConfigs") or []:
        sel = nc.get("nodeSelector") if isinstance(nc, Mapping) else None
        try:
            matched = isinstance(sel, Mapping) and selector_matches(sel, labels)
        except (ValueError, TypeError):
            continue
        if matched:
            s.update(pick(nc))
            break
    raw = annotations.get(_ANNOTATION_COLOCATION_STRATEGY)
    if raw:
        try:
            s.update(pick(loads_json(raw)))
        except ValueError:
            pass  # the batch_resource plugin reports a bad annotation
    s["enable"] = cluster_enabled and bool(s["enable"])
    return s


def device_resources(device: Mapping[str, Any] | None,
                     warned: set | BoundedCache[Any, bool] | None = None) -> dict[str, int | None]:
    """The node's device resources from its Device object (``None`` values: reset)."""
    reset: dict[str, int | None] = {r: None for r in RESOURCE_NAMES}
    if device is None:
        return reset
    raw_meta = device.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    where = f"Device {meta.get('name', '?')}"
    try:
        spec = field_mapping(device.get("spec"), where, "spec")
        devs = field_list(spec.get("devices"), where, "spec.devices")
        total: dict[str, int] = {}
        healthy = 0
        for i, d in enumerate(devs):
            d = field_mapping(d, where, f"spec.devices[{i}]")
            if d.get("type") != "gpu" or d.get("health") is not True:
                continue
            healthy += 1
            for r, v in resource_map(d.get("resources"), obj=where, field=f"spec.devices[{i}].resources").items():
                total[r] = total.get(r, 0) + v
    except ManifestError as e:
        warn_once(log, warned, (where, str(e)), "ignoring an invalid Device: the node's GPU resources are reset",
                  error=str(e))
        return reset
    if not healthy:
        return reset
    raw_labels = meta.get("labels")
    labels: Mapping[str, Any] = raw_labels if isinstance(raw_labels, Mapping) else {}
    if labels.get(LABEL_GPU_VENDOR, "") in ("", GPU_VENDOR_NVIDIA):
        total[RESOURCE_GPU] = total.get(RESOURCE_GPU_CORE, 0)
    total.pop(RESOURCE_GPU_SHARED, None)
    out: dict[str, int | None] = {}
    for r in sorted(total):
        out[r] = total[r]
    return out


def needs_sync(old: Mapping[str, int | None], new: Mapping[str, int | None], *, last_update: float | None,
               now: float, strategy: Mapping[str, Any]) -> bool:
    """``isCommonNodeNeedSync`` + the plugin's ``NeedSync`` (``util.IsResourceDiff`` over its resources)."""
    if last_update is None or now - last_update > strategy["updateTimeThresholdSeconds"]:
        return True
    for r, b in new.items():
        a = old.get(r)
        if (a is None) != (b is None):
            return True
        if a is not None and b is not None and abs(b - a) > a * strategy["resourceDiffThreshold"]:
            return True
    return False
