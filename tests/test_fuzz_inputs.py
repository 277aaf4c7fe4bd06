"""Property tests: generated manifests and profiles, mutated, never end in a traceback, a hang or a blow-up.

A valid cluster (nodes, pods, a NodeMetric) and a valid profile (every installed plugin's args, from
their defaults) are generated from the schemas the loaders accept, then mutated at a random place: a
wrong type, a non-finite or huge number, deep nesting, a broken encoding, a duplicate object, a kind
spelt differently. ``koordfw simulate`` runs on the result in a forked child under an address-space
limit and a timeout, and must exit 0 or print one ``koordfw: error:`` line naming the file.

Deterministic (``derandomize``); ``KOORDFW_FUZZ_EXAMPLES`` sets the examples per test (``make fuzz``).
"""

from __future__ import annotations

import copy
import json
import math
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koordfw import build_registry
from koordfw.core.profile import CONVERTER
from koordfw.testing.hostile import check_cli_outcome, run_cli

EXAMPLES = int(os.environ.get("KOORDFW_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])

# placeholders spliced into the serialised text, for what a serialiser would not write
DEEP, BADBYTES = "__DEEP_NESTING__", "__BAD_UTF8__"


@pytest.fixture(scope="module", autouse=True)
def warm_imports():
    """Import every plugin once in the parent, so each forked example starts warm."""
    build_registry(None)


# -- the schema: what the loaders accept -------------------------------------------------------------
names = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
cpu = st.sampled_from(["100m", "1", "2", "4", "0.5", "16", 2, 8])
memory = st.sampled_from(["128Mi", "1Gi", "8Gi", "64Gi", 1024, "1e9"])
labels = st.dictionaries(st.sampled_from(["zone", "disk", "app", "koordinator.sh/qosClass"]),
                         st.sampled_from(["a", "b", "ssd", "BE", "LS"]), max_size=3)


@st.composite
def node(draw, name):
    alloc = {"cpu": draw(cpu), "memory": draw(memory), "pods": 110}
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": draw(labels)},
           "status": {"allocatable": alloc, "capacity": dict(alloc)}}
    if draw(st.booleans()):
        obj["spec"] = {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}
    return obj


@st.composite
def pod(draw, name, node_names):
    res = {"requests": {"cpu": draw(cpu), "memory": draw(memory)}}
    if draw(st.booleans()):
        res["limits"] = dict(res["requests"])
    spec = {"containers": [{"name": "c", "resources": res}], "priority": draw(st.sampled_from([0, 100, 9000]))}
    if draw(st.booleans()):
        spec["nodeName"] = draw(st.sampled_from(node_names))
    if draw(st.booleans()):
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    if draw(st.booleans()):
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    # the kube-scheduler built-ins' inputs: pod (anti-)affinity, topology spread, host ports, a claim
    if draw(st.booleans()):
        spec.setdefault("affinity", {})["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "kubernetes.io/hostname"}],
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm": {
                "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["b"]}]},
                "topologyKey": "zone", "matchLabelKeys": ["app"]}}]}
    if draw(st.booleans()):
        spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable":
                                              draw(st.sampled_from(["DoNotSchedule", "ScheduleAnyway"])),
                                              "labelSelector": {"matchLabels": {"app": "a"}}, "minDomains": 2}]
    if draw(st.booleans()):
        spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]
    if draw(st.booleans()):
        spec["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": draw(labels),
                         "creationTimestamp": "2024-01-01T00:00:00Z",
                         "annotations": {"scheduling.koordinator.sh/resource-spec": '{"preferredCPUBindPolicy": "FullPCPUs"}'}},
            "spec": spec}


def node_metric(name):
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
            "status": {"updateTime": "2024-01-01T00:00:00Z",
                       "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1", "memory": "1Gi"}}},
                       "podsMetric": []}}


@st.composite
def cluster(draw):
    node_names = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    objs = [draw(node(n)) for n in node_names]
    objs += [draw(pod(f"p{i}", node_names)) for i in range(draw(st.integers(1, 4)))]
    objs.append(node_metric(node_names[0]))
    if draw(st.booleans()):  # the volume built-ins' objects
        objs += [{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "default"},
                  "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "wait",
                           "resources": {"requests": {"storage": "1Gi"}}}},
                 {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "wait"},
                  "provisioner": "csi.example.com", "volumeBindingMode": "WaitForFirstConsumer"},
                 {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv1"},
                  "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "2Gi"}, "storageClassName": "wait",
                           "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                               {"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}]
    if draw(st.booleans()):  # a Reservation (plugins/reservation)
        objs.append({"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
                     "metadata": {"name": "hold"},
                     "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {
                         "cpu": draw(cpu), "memory": draw(memory)}}}]}},
                              "owners": [{"labelSelector": {"matchLabels": {"app": "a"}}}], "ttl": "1h",
                              "allocatePolicy": draw(st.sampled_from(["", "Aligned", "Restricted"]))}})
    return objs


# -- mutations ---------------------------------------------------------------------------------------
HOSTILE = st.sampled_from([
    math.nan, math.inf, -math.inf, "NaN", ".inf", "1e400", "1e100000000", "1e16", "10E", "-1", -5,
    10**400, 2**63, "9" * 5000, True, None, "", [], {}, [1, [2]], {"a": {"b": 1}}, DEEP, BADBYTES,
    "0-100000000", "\x00", "x" * 300, 1.0e19, "2024-13-45T99:99:99Z",
])


def paths(obj, prefix=()):
    """Every (container path, key) in a JSON-like tree."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield prefix, k
            yield from paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield prefix, i
            yield from paths(v, prefix + (i,))


def at(obj, path):
    for p in path:
        obj = obj[p]
    return obj


@st.composite
def mutated(draw, base):
    """Mutate ``base`` (a list of objects, or a profile dict) in place a few times; returns it."""
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["value", "value", "value", "duplicate", "kind", "drop"]))
        if how == "duplicate" and isinstance(base, list):
            base.append(json.loads(json.dumps(draw(st.sampled_from(base)), default=str)))
            continue
        objects = [o for o in base if isinstance(o, dict) and isinstance(o.get("kind"), str)] \
            if isinstance(base, list) else []
        if how == "kind" and objects:
            o = draw(st.sampled_from(objects))
            o["kind"] = draw(st.sampled_from([o["kind"].lower(), o["kind"] + " ", o["kind"].upper(), 7]))
            continue
        spots = list(paths(base))
        if not spots:
            continue
        parent, key = draw(st.sampled_from(spots))
        container = at(base, parent)
        if how == "drop":
            del container[key]
        else:
            # a copy: a later mutation may go inside a mapping or list value, which must not change HOSTILE
            # itself (the next examples would then draw differently: hypothesis' FlakyStrategyDefinition)
            container[key] = copy.deepcopy(draw(HOSTILE))
    return base


def serialise(docs, fmt):
    if fmt == "json":
        text = json.dumps(docs[0] if len(docs) == 1 else {"kind": "List", "items": docs}, default=str)
    else:
        text = yaml.safe_dump_all(docs) if isinstance(docs, list) else yaml.safe_dump(docs)
    text = text.replace(f'"{DEEP}"', "[" * 400 + "]" * 400).replace(DEEP, "[" * 400 + "]" * 400)
    data = text.encode()
    return data.replace(BADBYTES.encode(), b"\xff\xfe")


def judge(tmp_path, argv, file, report_keys: set[str]) -> str:
    """The command on mutated input either refuses it (exit 2, one error line naming ``file`` and where
    in it) or accepts it and prints its whole JSON report (``report_keys`` at least); never anything else."""
    out = run_cli(argv, timeout=30)
    result = check_cli_outcome(out, names=[str(file)], max_seconds=25)
    if result == "error":
        line = out.stderr.strip().splitlines()[-1]
        assert "field" in line or "line" in line or "file" in line or ": " in line, line
    else:
        report = json.loads(out.stdout)
        assert isinstance(report, dict) and report_keys <= set(report), out.stdout[:300]
    return result


@FUZZ
@given(docs=cluster().flatmap(mutated), fmt=st.sampled_from(["yaml", "json"]))
def test_mutated_manifests(tmp_path, docs, fmt):
    f = tmp_path / f"cluster.{fmt}"
    f.write_bytes(serialise(docs, fmt))
    assert judge(tmp_path, ["simulate", str(f), "-o", "json"], f, {"pods", "nodes", "summary"}) in ("ok", "error")


@FUZZ
@given(docs=cluster().flatmap(mutated))
def test_mutated_manifests_deschedule(tmp_path, docs):
    f = tmp_path / "cluster.yaml"
    f.write_bytes(serialise(docs, "yaml"))
    assert judge(tmp_path, ["deschedule", str(f), "-o", "json"], f, {"migrations", "before", "after"}) in ("ok", "error")


def default_profile():
    """A profile naming every installed plugin's args at their defaults (their camelCase schema)."""
    reg = build_registry(None)
    config = {name: CONVERTER.unstructure(args) for name, args in reg.args.items() if args is not None}
    return {"percentageOfNodesToScore": 50, "pluginTimeoutSeconds": 30, "podInitialBackoffSeconds": 1,
            "podMaxBackoffSeconds": 10, "plugins": {"score": {"enabled": [{"name": "node_resources_fit", "weight": 2}]}},
            "disable": ["llc_isolation"], "pluginConfig": json.loads(json.dumps(config, default=str))}


@FUZZ
@given(profile=st.builds(default_profile).flatmap(mutated))
def test_mutated_profiles(tmp_path, profile):
    c = tmp_path / "cluster.yaml"
    c.write_text(yaml.safe_dump_all([node_metric("n"), {"kind": "Node", "metadata": {"name": "n"},
                                                        "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}]))
    p = tmp_path / "profile.yaml"
    p.write_bytes(serialise(profile, "yaml"))
    assert judge(tmp_path, ["simulate", str(c), "--profile", str(p), "-o", "json"], p,
                 {"pods", "nodes", "summary"}) in ("ok", "error")


def test_default_profile_is_valid(tmp_path):
    """The unmutated schema is accepted: the property tests start from valid input."""
    p = tmp_path / "profile.yaml"
    p.write_text(yaml.safe_dump(default_profile()))
    c = tmp_path / "cluster.yaml"
    c.write_text(yaml.safe_dump({"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "4"}}}))
    assert check_cli_outcome(run_cli(["simulate", str(c), "--profile", str(p)])) == "ok"
