"""The kubelet's cgroup driver, detected from the cgroup names as Koordinator's koordlet does
(GetCgroupDriverFromCgroupName: kubepods.slice → systemd, else kubepods → cgroupfs), and the pod and
container cgroup paths built for it; ``koordfw agent --cgroup-driver auto`` (the default) on fake trees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from koordfw.agent.cgroups import CgroupLayout, container_dir_name, detect_driver, detect_version, resolve_driver
from koordfw.cli import main
from koordfw.testing.cgroups import FakeNode

UID = "6f1c2a4e-1b2c-4d5e-8f90-0a1b2c3d4e5f"
ESC = UID.replace("-", "_")


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_detects_the_driver_from_the_tree(tmp_path, version, driver):
    node = FakeNode(tmp_path, version=version, driver=driver)
    assert detect_driver(node.root, version) == driver
    assert resolve_driver(node.root, version) == (driver, "kubepods.slice" if driver == "systemd" else "kubepods")


def test_systemd_is_looked_for_first(tmp_path):
    node = FakeNode(tmp_path, driver="cgroupfs")
    (node.root / "cpu" / "kubepods.slice").mkdir()  # both present: koordlet says systemd
    assert detect_driver(node.root, 1) == "systemd"


def test_v1_with_a_merged_cpu_controller(tmp_path):
    (tmp_path / "cpu,cpuacct" / "kubepods.slice").mkdir(parents=True)
    assert detect_version(tmp_path) == 1 and detect_driver(tmp_path, 1) == "systemd"


def test_nothing_to_detect_names_what_was_looked_for(tmp_path):
    (tmp_path / "cpu").mkdir()
    with pytest.raises(FileNotFoundError) as e:
        detect_driver(tmp_path, 1)
    assert f"{tmp_path}/cpu/kubepods.slice" in str(e.value) and f"{tmp_path}/cpu/kubepods" in str(e.value)
    assert "--cgroup-driver" in str(e.value)


def test_explicit_driver_and_kubepods(tmp_path):
    (tmp_path / "cpu").mkdir()
    assert resolve_driver(tmp_path, 1, "systemd") == ("systemd", "kubepods.slice")
    assert resolve_driver(tmp_path, 1, "cgroupfs") == ("cgroupfs", "kubepods")
    assert resolve_driver(tmp_path, 1, "auto", "custom.slice") == ("systemd", "custom.slice")
    assert resolve_driver(tmp_path, 1, "auto", "custom") == ("cgroupfs", "custom")
    with pytest.raises(ValueError, match="unknown cgroup driver"):
        resolve_driver(tmp_path, 1, "openrc")


@pytest.mark.parametrize("driver,qos,pod_dir", [
    ("systemd", "BestEffort", f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{ESC}.slice"),
    ("systemd", "Burstable", f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{ESC}.slice"),
    ("systemd", "Guaranteed", f"kubepods.slice/kubepods-pod{ESC}.slice"),
    ("cgroupfs", "BestEffort", f"kubepods/besteffort/pod{UID}"),
    ("cgroupfs", "Burstable", f"kubepods/burstable/pod{UID}"),
    ("cgroupfs", "Guaranteed", f"kubepods/pod{UID}"),
])
def test_pod_dirs_per_driver(driver, qos, pod_dir):
    layout = CgroupLayout(Path("/sys/fs/cgroup"), 2, driver, "kubepods.slice" if driver == "systemd" else "kubepods")
    assert layout.pod_dir(UID, qos) == pod_dir


@pytest.mark.parametrize("container_id,systemd,cgroupfs", [
    ("containerd://abc123", "cri-containerd-abc123.scope", "abc123"),
    ("docker://abc123", "docker-abc123.scope", "abc123"),
    ("cri-o://abc123", "crio-abc123.scope", "abc123"),
    ("pouch://abc123", "pouch-abc123.scope", "abc123"),
])
def test_container_dirs_per_driver(container_id, systemd, cgroupfs):
    assert container_dir_name("systemd", container_id) == systemd
    assert container_dir_name("cgroupfs", container_id) == cgroupfs
    layout = CgroupLayout(Path("/sys/fs/cgroup"), 1, "systemd", "kubepods.slice")
    assert layout.container_dir(UID, "BestEffort", container_id) == (
        f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{ESC}.slice/{systemd}")


@pytest.mark.parametrize("bad", ["abc123", "containerd://", "rkt://abc"])
def test_bad_container_ids(bad):
    with pytest.raises(ValueError, match="container ID"):
        container_dir_name("systemd", bad)


@pytest.mark.parametrize("version", [1, 2])
def test_discovery_on_a_systemd_tree_with_the_detected_driver(tmp_path, version):
    node = FakeNode(tmp_path, version=version, driver="systemd")
    rel = node.add_pod(UID, "besteffort", containers=("cri-containerd-abc123.scope", "crio-def456.scope"))
    driver, kubepods = resolve_driver(node.root, version)
    layout = CgroupLayout(node.root, version, driver, kubepods)
    [pod] = layout.discover()
    assert (pod.uid, pod.kube_qos, pod.cgroup_dir) == (UID, "BestEffort", rel)
    assert rel == layout.pod_dir(UID, "BestEffort")
    assert pod.containers == (("abc123", layout.container_dir(UID, "BestEffort", "containerd://abc123")),
                              ("def456", layout.container_dir(UID, "BestEffort", "cri-o://def456")))


@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_agent_cli_detects_the_driver(tmp_path, capsys, driver):
    node = FakeNode(tmp_path, driver=driver)
    node.add_pod(UID, "besteffort", containers=("cri-containerd-abc.scope",) if driver == "systemd" else ("abc",))
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("plugins:\n  qosPlan: {disabled: [{name: '*'}]}\n")
    rc = main(["agent", "--cgroup-root", str(node.root), "--config", str(cfg), "--once", "--dry-run"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["pods"] == 1
    # the wrong driver given explicitly finds no pods: the detection is what makes it work
    wrong = "cgroupfs" if driver == "systemd" else "systemd"
    rc = main(["agent", "--cgroup-root", str(node.root), "--config", str(cfg), "--once", "--dry-run",
               "--cgroup-driver", wrong])
    assert rc == 0 and json.loads(capsys.readouterr().out)["pods"] == 0


def test_agent_cli_without_kubepods_exits_2(tmp_path, capsys):
    (tmp_path / "cpu").mkdir()
    rc = main(["agent", "--cgroup-root", str(tmp_path), "--once", "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("koordfw: error: cannot tell the kubelet's cgroup driver")
