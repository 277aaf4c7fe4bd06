"""Quantities, the pod model and manifest loading (including bad input)."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from koordfw import ManifestError
from koordfw.core.model import pod_from_manifest
from koordfw.core.quantity import QuantityError, canonical, format_quantity, parse_quantity
from koordfw.inputs import load_manifests


@pytest.mark.parametrize("text,value", [
    ("500m", Fraction(1, 2)), ("1.5", Fraction(3, 2)), ("2Gi", 2 * 2**30), ("512Mi", 512 * 2**20), ("1e3", 1000),
    ("1k", 1000), ("1M", 10**6), ("100n", Fraction(1, 10**7)), (".5", Fraction(1, 2)), ("3", 3), (4, 4),
    (0.25, Fraction(1, 4)), ("1E-3", Fraction(1, 1000)), ("+2", 2), ("16Ki", 16 * 1024),
])
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "5 Gi", "1Gib", "--1", True, None, [1]])
def test_parse_quantity_rejects(bad):
    with pytest.raises(QuantityError):
        parse_quantity(bad)


@pytest.mark.parametrize("resource,text,canon", [
    ("cpu", "500m", 500), ("cpu", "1.5", 1500), ("cpu", "1m", 1), ("cpu", "0.0001", 1), ("memory", "1Gi", 2**30),
    ("memory", "1.5Ki", 1536), ("memory", "100m", 1), ("kubernetes.io/batch-cpu", "16000", 16000),
])
def test_canonical_units(resource, text, canon):
    assert canonical(resource, text) == canon


@pytest.mark.parametrize("resource", ["cpu", "memory"])
def test_canonical_fast_forms_agree_with_the_exact_parse(resource):
    # plain integers, "<n>m", "<n>Mi" (binary suffixes) and "<n>k" (decimal multipliers) take a shortcut;
    # it must give what the exact Fraction path gives, or
    # refuse what it refuses (int64 bounds, non-ASCII digits, empty, signs)
    from koordfw.core.quantity import to_int, to_milli

    exact = to_milli if resource == "cpu" else to_int
    texts = ["0", "1", "007", "999", "1001m", "1m", "0m", "m", "", "12a", "\u0661\u0662", "+1", "-1m",
             "9" * 15, "9" * 14 + "m", "9" * 16, "9" * 19, "9" * 20 + "m", "10Gi", "1e3"]
    texts += [str(7 ** k) for k in range(1, 20)] + [f"{7 ** k}m" for k in range(1, 20)]
    texts += [f"{7 ** k}{u}" for k in range(0, 14) for u in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "i", "Xi")]
    texts += [f"{7 ** k}{u}" for k in range(0, 14) for u in ("k", "M", "G", "T", "P", "E", "K", "x")] + ["k", "E", "-8k"]
    for text in texts:
        try:
            want: object = exact(text)
        except QuantityError as e:
            want = ("error", str(e))
        try:
            got: object = canonical(resource, text)
        except QuantityError as e:
            got = ("error", str(e))
        assert got == want, text


@pytest.mark.parametrize("resource,amount,text", [
    ("cpu", 2000, "2"), ("cpu", 1500, "1500m"), ("memory", 2**31, "2Gi"), ("memory", 3 * 2**20, "3Mi"), ("pods", 110, "110"),
])
def test_format_quantity(resource, amount, text):
    assert format_quantity(resource, amount) == text


def pod(containers, init=None, overhead=None, labels=None, priority=None):
    spec = {"containers": containers}
    if init:
        spec["initContainers"] = init
    if overhead:
        spec["overhead"] = overhead
    if priority is not None:
        spec["priority"] = priority
    return pod_from_manifest({"kind": "Pod", "metadata": {"name": "p", "labels": labels or {}}, "spec": spec})


def c(name, req=None, lim=None, restart=None):
    d = {"name": name, "resources": {}}
    if req:
        d["resources"]["requests"] = req
    if lim:
        d["resources"]["limits"] = lim
    if restart:
        d["restartPolicy"] = restart
    return d


def test_pod_requests_follow_the_kubernetes_rule():
    p = pod([c("a", {"cpu": "1", "memory": "1Gi"}), c("b", {"cpu": "500m"})],
            init=[c("i", {"cpu": "2", "memory": "512Mi"})], overhead={"cpu": "100m"})
    assert p.requests == {"cpu": 2100, "memory": 2**30}  # max(1.5, 2) + 0.1 cpu; max(1Gi, 512Mi)
    # a limit without a request counts as the request; extended resources are kept
    p = pod([c("a", lim={"cpu": "2", "nvidia.com/gpu": "1"})])
    assert p.requests == {"cpu": 2000, "nvidia.com/gpu": 1}


def test_sidecar_init_containers_add_to_the_sum():
    p = pod([c("a", {"cpu": "1"})], init=[c("proxy", {"cpu": "500m"}, restart="Always"), c("setup", {"cpu": "1"})])
    # setup runs beside the started proxy: max(1 + 0.5, 0.5 + 1) = 1.5
    assert p.requests["cpu"] == 1500


@pytest.mark.parametrize("containers,labels,kube,koord", [
    ([c("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})], {}, "Guaranteed", "LSR"),
    ([c("a", {"cpu": "1"})], {}, "Burstable", "LS"),
    ([c("a")], {}, "BestEffort", "BE"),
    ([c("a", {"cpu": "1"})], {"koordinator.sh/qosClass": "LSE"}, "Burstable", "LSE"),
    ([c("a")], {"koordinator.sh/qosClass": "bogus"}, "BestEffort", "BE"),
])
def test_qos_class(containers, labels, kube, koord):
    p = pod(containers, labels=labels)
    assert (p.kube_qos, p.qos_class) == (kube, koord)


@pytest.mark.parametrize("priority,labels,cls", [
    (9500, {}, "koord-prod"), (7000, {}, "koord-mid"), (5999, {}, "koord-batch"), (3000, {}, "koord-free"),
    (100, {}, ""), (100, {"koordinator.sh/priority-class": "koord-batch"}, "koord-batch"), (8500, {}, ""),
])
def test_priority_class(priority, labels, cls):
    assert pod([c("a")], labels=labels, priority=priority).priority_class == cls


def write(tmp_path, name, text):
    f = tmp_path / name
    f.write_text(text)
    return f


def test_load_directory_multidoc_list_and_json(tmp_path):
    write(tmp_path, "a.yaml", "kind: Node\napiVersion: v1\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '2'}}\n"
                              "---\nkind: Pod\napiVersion: v1\nmetadata: {name: p1}\nspec: {containers: []}\n")
    write(tmp_path, "b.json", json.dumps({"kind": "List", "apiVersion": "v1", "items": [
        {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p2", "namespace": "x"}, "spec": {}},
        {"kind": "NodeMetric", "apiVersion": "slo.koordinator.sh/v1alpha1", "metadata": {"name": "n1"},
         "status": {"updateTime": "2026-11-01T00:00:10Z"}}]}))
    (tmp_path / "ignored.txt").write_text("not a manifest")
    m = load_manifests([tmp_path])
    assert [n.name for n in m.nodes] == ["n1"]
    assert [p.key for p in m.pods] == ["default/p1", "x/p2"]
    assert [k for k, _ in m.objects] == ["NodeMetric"]
    assert m.newest_timestamp() == 1793491210.0


@pytest.mark.parametrize("text,parts", [
    ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {cpu: 2x}}}]}\n",
     ["bad.yaml", "Pod default/p", "spec.containers[0].resources.requests.cpu", "invalid quantity '2x'"]),
    ("kind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {priority: high}\n",
     ["bad.yaml", "Pod ns/p", "spec.priority"]),
    ("kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {memory: lots}}\n",
     ["bad.yaml", "Node n", "status.allocatable.memory"]),
    ("metadata: {name: x}\n", ["bad.yaml", "kind"]),
    ("kind: Pod\nmetadata: {}\n", ["bad.yaml", "metadata.name"]),
    ("kind: Pod\n  metadata: [\n", ["bad.yaml", "invalid YAML", "line"]),
    ("- just\n- a list\n", ["bad.yaml", "expected a Kubernetes object"]),
    ("kind: Node\nmetadata: {name: n}\nspec: {taints: [{effect: NoSchedule}]}\n", ["Node n", "spec.taints[0]"]),
    ("kind: Pod\nmetadata: {name: p, creationTimestamp: yesterday}\n", ["Pod default/p", "creationTimestamp"]),
])
def test_bad_manifest_names_file_object_and_field(tmp_path, text, parts):
    f = write(tmp_path, "bad.yaml", text)
    with pytest.raises(ManifestError) as e:
        load_manifests([f])
    for part in parts:
        assert part in str(e.value)


def test_missing_path_and_duplicates(tmp_path):
    with pytest.raises(ManifestError, match="no such file"):
        load_manifests([tmp_path / "nope.yaml"])
    f = write(tmp_path, "dup.yaml", "kind: Pod\nmetadata: {name: p}\n---\nkind: Pod\nmetadata: {name: p}\n")
    with pytest.raises(ManifestError, match="duplicate Pod default/p"):
        load_manifests([f])


@pytest.mark.parametrize("text,seconds", [
    ("30s", 30.0), ("1m30s", 90.0), ("1.5h", 5400.0), ("-2s", -2.0), ("0", 0.0), ("500ms", 0.5), (7, 7.0),
    ("1h2m3s4ms", 3723.004), ("5m0s", 300.0),
])
def test_parse_duration_go_syntax(text, seconds):
    from koordfw import parse_duration

    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "s", "1x", "1m 2s", "--1s", True, None, "1.2.3s", "2"])
def test_parse_duration_rejects(bad):
    from koordfw import parse_duration

    with pytest.raises(ValueError):
        parse_duration(bad)


def test_parse_duration_refuses_negative_only_when_asked():
    from koordfw.core.quantity import parse_duration

    assert parse_duration("-2s") == -2.0
    assert parse_duration("0", allow_negative=False) == 0.0
    with pytest.raises(ValueError, match=r"must not be negative, got '-2s'"):
        parse_duration("-2s", allow_negative=False)


@pytest.mark.parametrize("value,expected", [
    (None, None), ('{"cpu": "20", "memory": "64Gi"}', {"cpu": 20000, "memory": 64 * 2**30}),
    ("not json", "invalid JSON"), ('["cpu"]', "expected a JSON object"), ('{"cpu": "lots"}', "invalid quantity"),
])
def test_raw_allocatable_annotation(value, expected):
    from koordfw.inputs import make_node, raw_allocatable

    node = make_node("n1", annotations={} if value is None else {"node.koordinator.sh/raw-allocatable": value})
    if expected is None or isinstance(expected, dict):
        assert raw_allocatable(node) == expected
        return
    with pytest.raises(ManifestError) as e:
        raw_allocatable(node)
    assert expected in str(e.value)
    assert "Node n1" in str(e.value) and "metadata.annotations.node.koordinator.sh/raw-allocatable" in str(e.value)


def test_read_node_metric_common_part_and_errors():
    from koordfw.inputs import read_node_metric

    obj = {"metadata": {"name": "n1"},
           "status": {"updateTime": "2026-11-01T00:00:00Z",
                      "nodeMetric": {"nodeUsage": {"resources": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}},
                                     "systemUsage": {"resources": {"cpu": "500m"}}},
                      "podsMetric": [{"name": "web", "podUsage": {"resources": {"cpu": "1"}}, "priority": "koord-prod"},
                                     {"namespace": "ml", "name": "job", "podUsage": {"resources": {"memory": "2Gi"}}}]}}
    m = read_node_metric(obj, only=("cpu", "memory"))
    assert m.name == "n1" and m.ctx == "NodeMetric n1" and m.update_time == 1793491200.0
    assert m.node_usage == {"cpu": 2000, "memory": 2**30} and m.system_usage == {"cpu": 500}
    assert [(p.key, dict(p.usage), p.priority) for p in m.pods] == [
        ("default/web", {"cpu": 1000}, "koord-prod"), ("ml/job", {"memory": 2 * 2**30}, "")]
    assert read_node_metric(obj).node_usage["nvidia.com/gpu"] == 1
    obj["status"]["podsMetric"][1]["name"] = ""
    with pytest.raises(ManifestError, match=r"NodeMetric n1.*status\.podsMetric\[1\]\.name"):
        read_node_metric(obj)
    obj["status"]["nodeMetric"]["systemUsage"]["resources"]["cpu"] = "lots"
    with pytest.raises(ManifestError, match=r"status\.nodeMetric\.systemUsage\.resources\.cpu"):
        read_node_metric(obj)
