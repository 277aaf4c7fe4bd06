"""Hostile input (issue 16): one malformed ElasticQuota (annotations nested too deep, non-finite or huge
quantities) is reported naming the quota and the field and left out; the other quotas and their pods
go on. Out-of-range args are refused at profile load naming the field."""

from __future__ import annotations

import json

import pytest
from koordfw_elastic_quota import parse_quota

from koordfw.testing.hostile import check_cli_outcome, simulate_objects

SW = "quota.scheduling.koordinator.sh/shared-weight"
NS = "quota.scheduling.koordinator.sh/namespaces"
DEEP = "[" * 5000 + "]" * 5000


def node(name):
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": alloc, "capacity": alloc}}


def quota(name, ns, mn=None, mx=None, anns=None):
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": ns, "annotations": anns or {}},
            "spec": {"min": mn or {"cpu": "4"}, "max": mx or {"cpu": "8"}}}


def pod(name, ns):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}


def simulate(tmp_path, objs, profile=None):
    return simulate_objects(tmp_path, objs, profile)


BAD = [
    ("shared-weight nested", dict(anns={SW: DEEP}), SW),
    ("shared-weight NaN", dict(anns={SW: '{"cpu": NaN}'}), SW),
    ("shared-weight 1e400", dict(anns={SW: '{"cpu": 1e400}'}), SW),
    ("namespaces nested", dict(anns={NS: DEEP}), NS),
    ("max nan", dict(mx={"cpu": float("nan")}), "spec.max.cpu"),
    ("min 1e30", dict(mn={"cpu": "1e30"}), "spec.min.cpu"),
    ("max 10**30", dict(mx={"cpu": 10**30}), "spec.max.cpu"),
    ("max a list", dict(mx=["x"]), "spec.max"),
]


@pytest.mark.parametrize("kw, field", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_malformed_quota_is_reported_and_left_out(tmp_path, kw, field):
    out = simulate(tmp_path, [node("n1"), node("n2"), quota("qa", "a"), quota("qb", "b", **kw),
                              pod("a1", "a"), pod("a2", "a"), pod("b1", "b")])
    assert check_cli_outcome(out, max_seconds=20) == "ok"
    data = json.loads(out.stdout)
    pods = {p["name"]: p for p in data["pods"]}
    assert pods["a1"]["phase"] == pods["a2"]["phase"] == "Bound"
    bad = [q for q in data["quotas"] if q["name"] == "qb"]
    assert bad and "ElasticQuota b/qb" in bad[0]["error"] and field in bad[0]["error"]
    assert "invalid ElasticQuota ignored" in out.stderr and field in out.stderr


def test_parse_quota_names_the_field_of_a_huge_quantity():
    with pytest.raises(ValueError, match=r"ElasticQuota b/qb: spec.min.cpu: .*larger than 2\^63-1"):
        parse_quota(quota("qb", "b", mn={"cpu": "1e30"}))


BAD_ARGS = [("delayEvictTime", float("nan")), ("delayEvictTime", -1), ("revokePodInterval", float("inf")),
            ("revokePodInterval", -5), ("delayEvictTime", 1e30), ("defaultQuotaGroupMax", {"cpu": "nan"}),
            ("systemQuotaGroupMax", {"cpu": "-1"})]


@pytest.mark.parametrize("field, value", BAD_ARGS, ids=[f"{f}={v!r}" for f, v in BAD_ARGS])
def test_out_of_range_args_are_refused_naming_the_field(tmp_path, field, value):
    out = simulate(tmp_path, [node("n1"), pod("a", "default")], {"pluginConfig": {"elastic_quota": {field: value}}})
    assert check_cli_outcome(out, names=["pluginConfig.elastic_quota", field], max_seconds=20) == "error"
