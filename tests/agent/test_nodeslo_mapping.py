"""The NodeSLO → pluginConfig mapping: one table in code (NODESLO_ARGS), the same in docs/agent.md; each row
lands on an arg its plugin knows; what the manager's NodeSLO renderer writes is applied as is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from koordfw.agent.nodeslo import NODESLO_ARGS, NodeSLOError, host_apps_from_nodeslo, plugin_config_from_nodeslo
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict

DOC = Path(__file__).resolve().parents[2] / "docs" / "agent.md"


@pytest.fixture(scope="module")
def registry():
    return Registry(profile_from_dict({})).load(only={"be_suppress", "eviction", "llc_isolation", "memory_qos", "cpu_burst"})


def test_the_docs_table_is_the_code_table():
    text = DOC.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `spec.")]
    want = [f"| `spec.{r.slo}` | `{r.plugin}` | `{r.arg}` | {r.note or 'as is'} |" for r in NODESLO_ARGS]
    assert rows == want


SAMPLES = {"memoryEvictThresholdPercent": 80, "memoryEvictLowerPercent": 60,
           "cpuEvictBESatisfactionLowerPercent": 30, "cpuEvictBESatisfactionUpperPercent": 40,
           "cpuEvictBEUsageThresholdPercent": 50, "cpuEvictTimeWindowSeconds": 300, "cpuEvictPolicy": "evictByAllocatable",
           "enable": True, "cpuSuppressThresholdPercent": 40, "cpuSuppressMinPercent": 10,
           "cpuSuppressPolicy": "cfsQuota", "cpuQOS": {"enable": False}, "catRangeStartPercent": 10,
           "catRangeEndPercent": 90, "mbaPercent": 50, "minLimitPercent": 100,
           "lowLimitPercent": 60, "throttlingPercent": 80, "wmarkRatio": 90, "wmarkScalePermill": 30, "wmarkMinAdj": -10,
           "priorityEnable": 1, "priority": 6, "oomKillGroup": 1,
           "policy": "auto", "cpuBurstPercent": 500, "cfsQuotaBurstPercent": 200, "cfsQuotaBurstPeriodSeconds": 60,
           "sharePoolThresholdPercent": 70, "evictEnabledPriorityThreshold": 5999}


@pytest.mark.parametrize("row", NODESLO_ARGS, ids=lambda r: r.slo)
def test_every_row_sets_its_arg(registry, row):
    """Each NodeSLO field, set alone, changes exactly its plugin arg to the (converted) value."""
    *parents, last = row.slo.split(".")
    spec: dict = {}
    cur = spec
    for part in parents:
        cur = cur.setdefault(part, {})
    cur[last] = SAMPLES[last]
    out = plugin_config_from_nodeslo({"metadata": {"name": "n1"}, "spec": spec}, registry, {})
    want = SAMPLES[last] if row.convert is None else row.convert(SAMPLES[last])
    got = out[row.plugin]
    for part in row.arg.split("."):
        got = got[part]
    assert got == want


@pytest.mark.parametrize("spec, field", [
    ({"resourceUsedThresholdWithBE": []}, "spec.resourceUsedThresholdWithBE"),
    ({"resourceQOSStrategy": {"lsClass": {"resctrlQOS": "on"}}}, "spec.resourceQOSStrategy.lsClass.resctrlQOS"),
    ({"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True, "schedIdle": 2}}}},
     "spec.resourceQOSStrategy.beClass.cpuQOS"),
    ({"resourceUsedThresholdWithBE": {"cpuSuppressMinPercent": -1}}, "spec.resourceUsedThresholdWithBE.cpuSuppressMinPercent"),
    ("spec", "spec"),
])
def test_a_bad_field_is_named(registry, spec, field):
    with pytest.raises(NodeSLOError) as e:
        plugin_config_from_nodeslo({"metadata": {"name": "n1"}, "spec": spec}, registry, {})
    assert f"NodeSLO n1: field {field}:" in str(e.value)


def test_host_applications_resolve_against_the_kubelet_layout():
    obj = {"metadata": {"name": "n1"}, "spec": {"hostApplications": [
        {"name": "nginx", "qos": "LS", "priority": "koord-prod",
         "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "nginx/"}}]}}
    apps, specs = host_apps_from_nodeslo(obj, cgroup_version=1, cgroup_driver="systemd", kubepods="kubepods.slice")
    assert [(a.name, a.cgroup_path, a.is_be) for a in apps] == [
        ("nginx", "kubepods.slice/kubepods-besteffort.slice/nginx", False)]  # BE needs qos BE too
    assert specs["nginx"]["priority"] == "koord-prod"
    bad = {"metadata": {"name": "n1"}, "spec": {"hostApplications": [{"name": "x", "cgroupPath": {"base": "Elsewhere"}}]}}
    with pytest.raises(NodeSLOError, match=r"field spec\.hostApplications\[0\]\.cgroupPath\.base: unknown base"):
        host_apps_from_nodeslo(bad, cgroup_version=1, cgroup_driver="cgroupfs", kubepods="kubepods")
    for app, field in (({"name": "x", "cgroupPath": {"base": "CgroupRoot", "relativePath": "../../etc"}},
                        r"spec\.hostApplications\[0\]\.cgroupPath"),
                       ({"cgroupPath": {}}, r"spec\.hostApplications\[0\]"),
                       ("nginx", r"spec\.hostApplications\[0\]")):
        bad = {"metadata": {"name": "n1"}, "spec": {"hostApplications": [app]}}
        with pytest.raises(NodeSLOError, match=f"NodeSLO n1: field {field}"):
            host_apps_from_nodeslo(bad, cgroup_version=1, cgroup_driver="cgroupfs", kubepods="kubepods")


def test_what_the_manager_renders_is_applied(registry):
    """koordfw manager's NodeSLO (slo-controller-config over Koordinator's defaults) is read as is."""
    from koordfw.engines.kube.nodeslo import parse_slo_config, render_spec

    cfg, _errors = parse_slo_config({
        "resource-threshold-config": json.dumps({"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 50}}),
        "resource-qos-config": json.dumps({"clusterStrategy": {"beClass": {
            "resctrlQOS": {"enable": True, "catRangeEndPercent": 20}, "cpuQOS": {"enable": True}}}})})
    spec = render_spec(cfg, {})
    out = plugin_config_from_nodeslo({"metadata": {"name": "n1"}, "spec": spec}, registry,
                                     {"be_suppress": {"cpuSuppressPolicy": "cfsQuota", "beCPUIdle": False}})
    assert out["be_suppress"] == {"cpuSuppressPolicy": "cpuset", "beCPUIdle": True, "enable": True,
                                  "cpuSuppressThresholdPercent": 50}
    assert out["llc_isolation"] == {"BE": {"enable": True, "catRangeEndPercent": 20}}
