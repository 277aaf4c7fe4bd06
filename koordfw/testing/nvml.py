"""A fake of NVML (the ``pynvml`` calls koordfw's agent makes) and of the GPUs' sysfs entries, for tests on
machines without a GPU.

:class:`FakeNVML` behaves as ``nvidia-ml-py`` does: every call but ``nvmlInit`` fails with
:class:`NVMLError` ("Uninitialized") before ``nvmlInit`` or after the matching ``nvmlShutdown`` (init is
reference-counted), an unknown PCI bus id is "Not Found", bus ids are matched case-insensitively with the
domain in 4 or 8 digits, and strings come back as ``str`` (as nvidia-ml-py 11.5+ returns them).
``no_driver=True`` makes ``nvmlInit`` fail as it does without a loaded driver.
:meth:`FakeNVML.write_sysfs` lays out ``/sys/bus/pci/drivers/nvidia/<bus>`` and
``/sys/bus/pci/devices/<bus>`` (a symlink into ``devices/pci<domain>:<bus>/...`` with ``numa_node``).
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs


class NVMLError(Exception):
    """pynvml's NVMLError: ``value`` is the NVML return code."""

    ERROR_UNINITIALIZED = 1
    ERROR_NOT_FOUND = 6
    ERROR_DRIVER_NOT_LOADED = 9

    _NAMES = {1: "Uninitialized", 6: "Not Found", 9: "Driver Not Loaded"}

    def __init__(self, value: int) -> None:
        super().__init__(self._NAMES.get(value, f"Unknown Error {value}"))
        self.value = value


@attrs.frozen
class MemoryInfo:
    total: int
    free: int
    used: int


@attrs.frozen
class PciInfo:
    """``nvmlPciInfo_t``: ``busId`` as NVML writes it (8-digit domain, upper case: ``00000000:3B:00.0``)."""

    busId: str  # noqa: N815 (NVML's field name)


@attrs.define
class FakeGPU:
    uuid: str
    bus_id: str  # "0000:3b:00.0"
    minor: int
    memory_total: int = 16 * 2**30
    name: str = "NVIDIA A100-SXM4-80GB"
    numa_node: int = 0
    #: the PCIe root the function hangs off, as ``pci<domain>:<bus>``
    pcie_root: str = "pci0000:3a"


def _norm(bus_id: str) -> str:
    """A PCI address with a 4-digit domain, lower case (NVML accepts 4 or 8 digits)."""
    b = bus_id.strip().lower()
    dom, _, rest = b.partition(":")
    if rest.count(":") == 1:
        return f"{int(dom, 16):04x}:{rest}"
    return f"0000:{b}"


class FakeNVML:
    """NVML over a list of :class:`FakeGPU` (indices in list order)."""

    def __init__(self, gpus: list[FakeGPU], *, driver_version: str = "535.104.05", no_driver: bool = False) -> None:
        self.gpus = list(gpus)
        self.driver_version = driver_version
        self.no_driver = no_driver
        self._inits = 0
        self.calls: list[str] = []

    def _check(self) -> None:
        if self._inits <= 0:
            raise NVMLError(NVMLError.ERROR_UNINITIALIZED)

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.no_driver:
            raise NVMLError(NVMLError.ERROR_DRIVER_NOT_LOADED)
        self._inits += 1

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")
        self._check()
        self._inits -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGPU:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVMLError.ERROR_NOT_FOUND)
        return self.gpus[index]

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> FakeGPU:
        self._check()
        want = _norm(bus_id)
        for g in self.gpus:
            if _norm(g.bus_id) == want:
                return g
        raise NVMLError(NVMLError.ERROR_NOT_FOUND)

    def nvmlDeviceGetPciInfo(self, h: FakeGPU) -> PciInfo:
        self._check()
        return PciInfo("0000" + _norm(h.bus_id).upper())

    def nvmlDeviceGetUUID(self, h: FakeGPU) -> str:
        self._check()
        return h.uuid

    def nvmlDeviceGetMinorNumber(self, h: FakeGPU) -> int:
        self._check()
        return h.minor

    def nvmlDeviceGetMemoryInfo(self, h: FakeGPU) -> MemoryInfo:
        self._check()
        return MemoryInfo(total=h.memory_total, free=h.memory_total, used=0)

    def nvmlDeviceGetIndex(self, h: FakeGPU) -> int:
        self._check()
        return self.gpus.index(h)

    def nvmlDeviceGetName(self, h: FakeGPU) -> str:
        self._check()
        return h.name

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self.driver_version

    def write_sysfs(self, sys_root: str | os.PathLike[str]) -> None:
        """The PCI sysfs entries of the GPUs under ``sys_root`` (the ``/sys`` of a fake node)."""
        root = Path(sys_root)
        drivers = root / "bus/pci/drivers/nvidia"
        devices = root / "bus/pci/devices"
        drivers.mkdir(parents=True, exist_ok=True)
        devices.mkdir(parents=True, exist_ok=True)
        for g in self.gpus:
            bus = _norm(g.bus_id)
            real = root / "devices" / g.pcie_root / f"{g.pcie_root[3:]}:00.0" / bus
            real.mkdir(parents=True, exist_ok=True)
            (real / "numa_node").write_text(f"{g.numa_node}\n")
            for link in (devices / bus, drivers / bus):
                if not link.is_symlink():
                    link.symlink_to(os.path.relpath(real, link.parent))
