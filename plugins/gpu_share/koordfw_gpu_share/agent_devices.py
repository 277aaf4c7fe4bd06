"""The node-side GPU reporter: builds Koordinator's ``Device`` object from NVML (``nvidia-ml-py``).

``koordfw agent-devices`` prints it (YAML or JSON). Without NVML, a driver or a GPU it says which and
exits 1. Each GPU gets ``gpu-core: 100``, ``gpu-memory-ratio: 100``, ``gpu-memory: <total bytes>``
(koordlet's ``states_device_linux.go``); the minor number comes from ``nvmlDeviceGetMinorNumber``. The
GPU's ``topology`` is koordlet's too (``helper/topology.go``): from its PCI bus id (``nvmlDeviceGetPciInfo``),
the NUMA node in sysfs ``numa_node`` (-1 read as 0) and the PCIe root complex (``pciDDDD:BB``) of the device's
sysfs path; ``socketID`` -1. A GPU whose bus id or sysfs entry cannot be read gets no topology.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

from koordfw.embed import Commands
from koordfw.extension import RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO, SCHEDULING_GROUP_VERSION


class NoGpu(RuntimeError):
    """NVML is absent, has no driver, or sees no GPU."""


def _nvml() -> Any:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        raise NoGpu("NVML is not available (install the 'nvml' extra: nvidia-ml-py)") from None
    return pynvml


#: the PCI devices' directory in sysfs (koordlet's ``system.GetPCIDeviceDir``)
PCI_DEVICE_DIR = Path("/sys/bus/pci/devices")
_ROOT_COMPLEX = re.compile(r"pci\d{4}:[0-9a-fA-F]{2}")
_BUS_ID = re.compile(r"^(?:[0-9a-fA-F]{4})?([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def pci_topology(bus_id: str, pci_dir: Path = PCI_DEVICE_DIR) -> dict | None:
    """A GPU's Device ``topology`` from its PCI bus id (NVML's ``00000000:3B:00.0`` or sysfs' ``0000:3b:00.0``):
    ``{"socketID": -1, "nodeID": N, "pcieID": "pci0000:3a", "busID": "0000:3b:00.0"}``, or None when the bus id
    is not one or sysfs does not know it (koordlet then reports no topology)."""
    m = _BUS_ID.match(bus_id.strip())
    if m is None:
        return None
    bdf = f"{m[1]}:{m[2]}:{m[3]}.{m[4]}".lower()
    try:
        node = int((pci_dir / bdf / "numa_node").read_text().strip())
        path = os.path.realpath(pci_dir / bdf)
    except (OSError, ValueError):
        return None
    root = _ROOT_COMPLEX.search(path)
    if root is None:
        return None
    return {"socketID": -1, "nodeID": max(node, 0), "pcieID": root[0], "busID": bdf}


def _bus_id(nv: Any, h: Any) -> str:
    try:
        raw = nv.nvmlDeviceGetPciInfo(h).busId
    except Exception:  # an NVML without it, or the call failing: no topology for this GPU
        return ""
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def build_device(node_name: str, nvml: Any | None = None, pci_dir: Path = PCI_DEVICE_DIR) -> dict:
    """The ``Device`` object (``scheduling.koordinator.sh/v1alpha1``) for this node's GPUs."""
    nv = nvml if nvml is not None else _nvml()
    try:
        nv.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound / DriverNotLoaded / ...
        raise NoGpu(f"NVML could not start (no NVIDIA driver or GPU?): {e}") from None
    try:
        n = int(nv.nvmlDeviceGetCount())
        if n == 0:
            raise NoGpu("NVML sees no GPU on this node")
        devices = []
        for i in range(n):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            uuid = nv.nvmlDeviceGetUUID(h)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            mem = int(nv.nvmlDeviceGetMemoryInfo(h).total)
            try:
                minor = int(nv.nvmlDeviceGetMinorNumber(h))
            except Exception:
                minor = i
            dev = {"type": "gpu", "id": uuid, "minor": minor, "health": True,
                   "resources": {RESOURCE_GPU_CORE: "100", RESOURCE_GPU_MEMORY: str(mem),
                                 RESOURCE_GPU_MEMORY_RATIO: "100"}}
            topology = pci_topology(_bus_id(nv, h), pci_dir)
            if topology is not None:
                dev["topology"] = topology
            devices.append(dev)
        return {"apiVersion": SCHEDULING_GROUP_VERSION, "kind": "Device",
                "metadata": {"name": node_name}, "spec": {"devices": sorted(devices, key=lambda d: d["minor"])}}
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def register(sub: Commands) -> None:
    p = sub.add("devices", help="print this node's Koordinator Device object from NVML",
                description="Build the scheduling.koordinator.sh/v1alpha1 Device object of this node's "
                            "GPUs from NVML. Exits 1 on a machine without NVML or GPUs.")
    p.add_argument("--node-name", default=None, help="Device name (default: the host name)")
    p.add_argument("--output", "-o", choices=("yaml", "json"), default="yaml", help="yaml (default) or json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        dev = build_device(args.node_name or socket.gethostname())
    except NoGpu as e:
        print(f"koordfw agent devices: {e}", file=sys.stderr)
        return 1
    if args.output == "json":
        json.dump(dev, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        import yaml

        yaml.safe_dump(dev, sys.stdout, sort_keys=False)
    return 0
