"""Hostile input (issue 16): a gang whose groups annotation cannot be read, or a PodGroup with numbers
beyond int32, takes down no more than itself. The groups annotation is ignored with a warning naming
the gang and the annotation (Koordinator's behaviour); a malformed PodGroup leaves its gang
uninitialised with a reason naming the field. The other gangs and pods bind; the report still comes."""

from __future__ import annotations

import json

import pytest

from koordfw.testing.hostile import check_cli_outcome, simulate_objects

GROUPS = "gang.scheduling.koordinator.sh/groups"
DEEP = "[" * 5000 + "]" * 5000


def node(name):
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": alloc, "capacity": alloc}}


def pod(name, labels=None, annotations=None):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}


def gang(prefix, n, **anns):
    return [pod(f"{prefix}-{i}", annotations={"gang.scheduling.koordinator.sh/name": prefix,
                                              "gang.scheduling.koordinator.sh/min-available": str(n), **anns})
            for i in range(n)]


def pod_group(spec, annotations=None):
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "crd", "namespace": "default", "annotations": annotations or {}}, "spec": spec}


CRD = [pod(f"crd-{i}", labels={"pod-group.scheduling.sigs.k8s.io": "crd"}) for i in range(2)]
GOOD = [node("n1"), *gang("ok", 2), pod("single")]


def simulate(tmp_path, objs, profile=None):
    return simulate_objects(tmp_path, objs, profile)


def placed(out):
    assert check_cli_outcome(out, max_seconds=20) == "ok"
    assert "plugin raised" not in out.stderr, out.stderr[-2000:]
    data = json.loads(out.stdout)
    return {p["name"]: p for p in data["pods"]}, {g["gang"]: g for g in data.get("gangs", [])}


@pytest.mark.parametrize("value", [DEEP, "[NaN]", '{"a": 1}', "[1, 2]"])
def test_unreadable_groups_are_ignored_with_a_warning(tmp_path, value):
    pods, gangs = placed(simulate(tmp_path, [*GOOD, *gang("bad", 2, **{GROUPS: value})]))
    assert all(p["phase"] == "Bound" for p in pods.values())
    assert gangs["default/bad"]["group"] == "default/bad"


def test_the_groups_warning_names_the_gang(tmp_path):
    out = simulate(tmp_path, [*GOOD, *gang("bad", 2, **{GROUPS: DEEP})])
    assert check_cli_outcome(out, max_seconds=20) == "ok"
    warnings = [ln for ln in out.stderr.splitlines() if "ignoring invalid gang annotation" in ln]
    assert warnings and "default/bad" in warnings[0] and GROUPS in warnings[0]


@pytest.mark.parametrize("spec, field", [
    ({"minMember": 2, "scheduleTimeoutSeconds": 10**400}, "spec.scheduleTimeoutSeconds"),
    ({"minMember": 2, "scheduleTimeoutSeconds": float("inf")}, "spec.scheduleTimeoutSeconds"),
    ({"minMember": 10**400}, "spec.minMember"),
    ({"minMember": 2**31}, "spec.minMember"),
])
def test_a_malformed_pod_group_fails_only_its_gang(tmp_path, spec, field):
    pods, gangs = placed(simulate(tmp_path, [*GOOD, pod_group(spec), *CRD]))
    assert all(pods[n]["phase"] == "Bound" for n in ("ok-0", "ok-1", "single"))
    assert pods["crd-0"]["phase"] == pods["crd-1"]["phase"] == "Pending"
    assert field in pods["crd-0"]["reason"] and "PodGroup default/crd" in pods["crd-0"]["reason"]
    assert gangs["default/crd"]["phase"] == "NotInitialized" and field in gangs["default/crd"]["error"]


def test_a_pod_group_with_nested_groups_annotation_still_schedules(tmp_path):
    pods, gangs = placed(simulate(tmp_path, [*GOOD, pod_group({"minMember": 2}, {GROUPS: DEEP}), *CRD]))
    assert all(p["phase"] == "Bound" for p in pods.values())


def test_a_huge_min_available_annotation_is_a_definition_error(tmp_path):
    pods, gangs = placed(simulate(tmp_path, [*GOOD, *gang("big", 2, **{
        "gang.scheduling.koordinator.sh/min-available": "9" * 5000})]))
    assert pods["ok-0"]["phase"] == "Bound"
    assert pods["big-0"]["phase"] == "Pending" and "min-available" in pods["big-0"]["reason"]


@pytest.mark.parametrize("field, value", [("defaultTimeout", "NaNs"), ("defaultTimeout", "-5s"),
                                          ("defaultTimeout", float("inf")), ("defaultMatchPolicy", "x")])
def test_bad_args_are_refused_naming_the_field(tmp_path, field, value):
    out = simulate(tmp_path, [node("n1"), pod("a")], {"pluginConfig": {"gang": {field: value}}})
    assert check_cli_outcome(out, names=["pluginConfig.gang", field], max_seconds=20) == "error"
