"""The node's GPUs as Koordinator's ``Device`` object (``scheduling.koordinator.sh/v1alpha1``, named like the
node), built the way koordlet's ``states_device_linux.go`` and its GPU collector
(``metricsadvisor/devices/gpu/collector_gpu_linux.go``) build it.

NVML is reached through :class:`NVML`, the few calls of ``nvidia-ml-py`` (``pynvml``) koordlet makes:
the GPUs are the PCI functions bound to the ``nvidia`` driver (``/sys/bus/pci/drivers/nvidia/<bus id>``),
each looked up with ``nvmlDeviceGetHandleByPciBusId`` for its UUID, minor number, memory and index;
its NUMA node is the PCI function's ``numa_node`` (-1 read as 0) and its PCIe root complex the
``pci<domain>:<bus>`` component of the function's resolved sysfs path. Per GPU the Device lists
``koordinator.sh/gpu-core: 100``, ``gpu-memory: <total bytes>``, ``gpu-memory-ratio: 100``, ``minor``,
``id`` (the UUID), ``health`` and ``topology`` (``socketID: -1``, ``nodeID``, ``pcieID``, ``busID``), and
a ``Healthy`` condition when the health is known. The object's labels name the vendor (``nvidia``), the
model (the common ``nvmlDeviceGetName`` without "NVIDIA ", spaces as dashes) and the driver version.

:class:`DeviceReporter` keeps the health across rounds: a GPU that reported an Xid critical error
(:meth:`DeviceReporter.mark_unhealthy`, what koordlet's health check does) stays unhealthy, as in koordlet.
A machine without NVML or GPUs has no Device (:class:`NoGpu`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs

from ..extension import (
    GPU_VENDOR_NVIDIA,
    LABEL_GPU_DRIVER_VERSION,
    LABEL_GPU_MODEL,
    LABEL_GPU_VENDOR,
    RESOURCE_GPU_CORE,
    RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO,
    SCHEDULING_GROUP_VERSION,
)

NVIDIA_DRIVER_DIR = "bus/pci/drivers/nvidia"
PCI_DEVICE_DIR = "bus/pci/devices"
#: koordlet's pciAddressRegex and pcieRegexp
PCI_ADDRESS = re.compile(r"^((1?[0-9a-f]{0,4}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-9a-f]{1})$")
PCIE_ROOT = re.compile(r"pci\d{4}:[0-9a-fA-F]{2}")


class NoGpu(RuntimeError):
    """NVML is absent, has no driver, or sees no GPU."""


class NVML(Protocol):
    """The part of ``pynvml`` used here (a module or an object with these functions)."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetIndex(self, handle: Any) -> int: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...


def load_pynvml() -> NVML:
    """The real NVML binding (``nvidia-ml-py``), or :class:`NoGpu`."""
    try:
        import pynvml
    except ImportError:
        raise NoGpu("NVML is not available (install nvidia-ml-py)") from None
    nvml: NVML = pynvml
    return nvml


def _text(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


@attrs.frozen
class GPUInfo:
    uuid: str
    minor: int
    index: int
    memory_total: int
    node_id: int
    pcie: str
    bus_id: str
    name: str


def gpu_bus_ids(sys_root: str | os.PathLike[str] = "/sys") -> list[str]:
    """GetGPUDevicePCIBusIDs: the PCI addresses bound to the nvidia driver."""
    try:
        names = sorted(os.listdir(Path(sys_root) / NVIDIA_DRIVER_DIR))
    except OSError:
        return []
    return [n.lower() for n in names if PCI_ADDRESS.match(n.lower())]


def pci_info(sys_root: str | os.PathLike[str], bus_id: str) -> tuple[int, str]:
    """ParsePCIInfo: (NUMA node, PCIe root complex id) of a PCI function; ``OSError`` when unreadable."""
    dev = Path(sys_root) / PCI_DEVICE_DIR / bus_id
    text = (dev / "numa_node").read_text().strip()
    node = int(text)
    if node == -1:
        node = 0
    m = PCIE_ROOT.search(os.path.realpath(dev))
    return node, (m.group(0) if m else "")


def read_gpus(nvml: NVML, sys_root: str | os.PathLike[str] = "/sys") -> tuple[list[GPUInfo], str]:
    """initGPUData: every GPU by NVML index, and the driver version ("" when NVML does not say).
    Raises :class:`NoGpu` without NVML, driver or GPU."""
    bus_ids = gpu_bus_ids(sys_root)
    if not bus_ids:
        raise NoGpu("no GPU bound to the nvidia driver")
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound / DriverNotLoaded / ...
        raise NoGpu(f"NVML could not start (no NVIDIA driver?): {e}") from None
    try:
        gpus = []
        for bus in bus_ids:
            try:
                h = nvml.nvmlDeviceGetHandleByPciBusId(bus)
                uuid = _text(nvml.nvmlDeviceGetUUID(h))
                minor = int(nvml.nvmlDeviceGetMinorNumber(h))
                mem = int(nvml.nvmlDeviceGetMemoryInfo(h).total)
                index = int(nvml.nvmlDeviceGetIndex(h))
                name = _text(nvml.nvmlDeviceGetName(h))
            except Exception as e:
                raise NoGpu(f"unable to read the GPU at PCI bus id {bus}: {e}") from None
            try:
                node, pcie = pci_info(sys_root, bus)
            except (OSError, ValueError) as e:
                raise NoGpu(f"failed to parse the PCI info of {bus}: {e}") from None
            gpus.append(GPUInfo(uuid, minor, index, mem, node, pcie, bus, name))
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception:
            driver = ""
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    gpus.sort(key=lambda g: g.index)
    return gpus, driver


def gpu_model(gpus: list[GPUInfo]) -> str:
    """getGPUDriverAndModel's model: the one name of all GPUs, without "NVIDIA ", spaces as dashes; ""
    when they differ or one is empty."""
    names = {g.name for g in gpus}
    if len(names) != 1 or "" in names:
        return ""
    return next(iter(names)).removeprefix("NVIDIA ").replace(" ", "-")


class DeviceReporter:
    """Builds this node's Device from NVML each round, keeping GPUs found unhealthy unhealthy."""

    def __init__(self, nvml: NVML, *, sys_root: str | os.PathLike[str] = "/sys") -> None:
        self.nvml = nvml
        self.sys_root = sys_root
        #: bus id → (error code, message) of GPUs found unhealthy (there is no way back, as in koordlet)
        self.unhealthy: dict[str, tuple[str, str]] = {}

    def mark_unhealthy(self, bus_id: str, xid: int = 0, message: str = "") -> None:
        """Record a health-check event (an Xid critical error; ``xid`` 0: health checks unsupported)."""
        code = f"Xid{xid}" if xid else "DeviceHealthCheckNotSupported"
        self.unhealthy[bus_id.lower()] = (code, message or f"Xid error detected on device, error code: {xid}")

    def device(self, node_name: str, node_uid: str = "", *, now: str = "") -> dict[str, Any]:
        """The Device object (``now``: the conditions' ``lastTransitionTime``, RFC 3339); :class:`NoGpu`
        on a machine without NVML, driver or GPU."""
        gpus, driver = read_gpus(self.nvml, self.sys_root)
        devices = []
        for g in gpus:
            info: dict[str, Any] = {"type": "gpu", "id": g.uuid, "minor": g.minor}
            bad = self.unhealthy.get(g.bus_id)
            info["health"] = bad is None
            info["resources"] = {RESOURCE_GPU_CORE: "100", RESOURCE_GPU_MEMORY: str(g.memory_total),
                                 RESOURCE_GPU_MEMORY_RATIO: "100"}
            if g.node_id >= 0 and g.pcie and g.bus_id:
                info["topology"] = {"socketID": -1, "nodeID": g.node_id, "pcieID": g.pcie, "busID": g.bus_id}
            if bad is not None:  # koordlet sets a status (hence a condition) only on unhealthy GPUs
                info["conditions"] = [{"type": "Healthy", "status": "False", "lastTransitionTime": now,
                                       "reason": bad[0], "message": bad[1]}]
            devices.append(info)
        devices.sort(key=lambda d: ("gpu", d["minor"]))
        labels = {LABEL_GPU_VENDOR: GPU_VENDOR_NVIDIA}
        model = gpu_model(gpus)
        if model and driver:  # koordlet reports both or neither
            labels[LABEL_GPU_MODEL] = model
            labels[LABEL_GPU_DRIVER_VERSION] = driver
        meta: dict[str, Any] = {"name": node_name, "labels": labels}
        if node_uid:
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid,
                                        "controller": True, "blockOwnerDeletion": True}]
        return {"apiVersion": SCHEDULING_GROUP_VERSION, "kind": "Device", "metadata": meta,
                "spec": {"devices": devices}}


def device_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """updateDevice's check: the devices (sorted by type, minor), labels or annotations differ."""
    def devs(o: Mapping[str, Any]) -> list:
        d = (o.get("spec") or {}).get("devices") or []
        return sorted(d, key=lambda x: (str(x.get("type")), x.get("minor") if isinstance(x.get("minor"), int) else -1))

    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    return (devs(old) != devs(new) or (om.get("labels") or {}) != (nm.get("labels") or {})
            or (om.get("annotations") or {}) != (nm.get("annotations") or {}))


def carry_transition_times(old: Mapping[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """A condition whose status did not change keeps the old ``lastTransitionTime`` (updateDevice)."""
    if not old:
        return new
    before: dict[tuple[str, str], Mapping[str, Any]] = {}
    for d in (old.get("spec") or {}).get("devices") or []:
        if isinstance(d, Mapping):
            for c in d.get("conditions") or []:
                if isinstance(c, Mapping):
                    before[(str(d.get("id")), str(c.get("type")))] = c
    for d in new["spec"]["devices"]:
        for c in d.get("conditions") or []:
            prev = before.get((d["id"], c["type"]))
            if prev is not None and prev.get("status") == c["status"] and prev.get("lastTransitionTime"):
                c["lastTransitionTime"] = prev["lastTransitionTime"]
    return new
