"""colocation_profile: the cases of Koordinator's webhook tests (pkg/webhook/pod/mutating/
cluster_colocation_profile_test.go, extended_resource_spec_test.go, pkg/webhook/pod/validating/
cluster_colocation_profile_test.go), as facts: the same inputs give the same pods and the same reasons."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import anyio
import attrs
import numpy as np
import pytest
from koordfw_colocation_profile import (
    ColocationProfileArgs,
    aggregate,
    apply_profiles,
    parse_profile,
    strategic_merge_pod,
    validation_errors,
)

from koordfw import ManifestError, build_registry
from koordfw.core.admission import Admission, StaticObjects
from koordfw.embed import VirtualClock
from koordfw.extension import ANNOTATION_EXTENDED_RESOURCE_SPEC, BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY

QOS, PRIO = "koordinator.sh/qosClass", "koordinator.sh/priority"
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "default", "labels": {"enable-koordinator-colocation": "true"}}}
BATCH_PC = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "koordinator-batch"},
            "value": 5999, "preemptionPolicy": "fakePreemptionPolicy"}


def res(cpu: str, mem: str) -> dict[str, str]:
    return {"cpu": cpu, "memory": mem}


def base_pod(**spec: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "default", "name": "test-pod-1", "labels": {"koordinator-colocation-pod": "true"}},
        "spec": {
            "initContainers": [{"name": "test-init-container-a",
                                "resources": {"limits": res("500m", "1Gi"), "requests": res("500m", "1Gi")}}],
            "containers": [{"name": "test-container-a",
                            "resources": {"limits": res("1", "4Gi"), "requests": res("1", "4Gi")}}],
            "overhead": res("1", "2Gi"),
            "schedulerName": "nonExistSchedulerName", "priority": 5999,
        },
    }
    pod["spec"].update(spec)
    return pod


def base_profile(name: str = "test-profile", annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"enable-koordinator-colocation": "true"}},
        "selector": {"matchLabels": {"koordinator-colocation-pod": "true"}},
        "labels": {"testLabelA": "valueA"}, "annotations": {"testAnnotationA": "valueA"},
        "schedulerName": "koordinator-scheduler", "qosClass": "BE", "priorityClassName": "koordinator-batch",
        "koordinatorPriority": 1111,
        "patch": {"metadata": {"labels": {"test-patch-label": "patch-a"},
                               "annotations": {"test-patch-annotation": "patch-b"}}},
    }
    s.update(spec)
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile", "metadata": meta,
            "spec": s}


BATCH_INIT = {"limits": {BATCH_CPU: "500", BATCH_MEMORY: "1Gi"}, "requests": {BATCH_CPU: "500", BATCH_MEMORY: "1Gi"}}
BATCH_MAIN = {"limits": {BATCH_CPU: "1k", BATCH_MEMORY: "4Gi"}, "requests": {BATCH_CPU: "1k", BATCH_MEMORY: "4Gi"}}
BATCH_OVERHEAD = {BATCH_CPU: "1k", BATCH_MEMORY: "2Gi"}
MUTATED_LABELS = {"koordinator-colocation-pod": "true", "testLabelA": "valueA", "test-patch-label": "patch-a",
                  QOS: "BE", PRIO: "1111"}
MUTATED_ANNOTATIONS = {"testAnnotationA": "valueA", "test-patch-annotation": "patch-b"}
MUTATED_SPEC = {"schedulerName": "koordinator-scheduler", "priority": 5999, "priorityClassName": "koordinator-batch",
                "preemptionPolicy": "fakePreemptionPolicy"}


@attrs.define
class FakeHandle:
    """An AdmissionHandle whose draws are fixed, as Koordinator's test replaces randIntnFn."""

    store: StaticObjects
    draw: int | None = None
    plugin_name: str = "colocation_profile"
    args: Any = None
    clock: VirtualClock = attrs.field(factory=lambda: VirtualClock(0.0))

    @property
    def rng(self) -> Any:
        draw = self.draw

        class _Fixed:
            def integers(self, n: int) -> int:
                assert draw is not None, "the profile drew a number; the case did not expect one"
                return draw
        return _Fixed()

    def now(self) -> float:
        return self.clock.now()

    def objects(self, api_version: str, kind: str) -> Any:
        return self.store.objects(api_version, kind)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        return self.store.get(api_version, kind, name, namespace)


def expected(labels: dict | None = None, annotations: dict | None = None, init: dict | None = BATCH_INIT,
             main: dict | None = BATCH_MAIN, overhead: dict | None = BATCH_OVERHEAD, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "default", "name": "test-pod-1",
                            "labels": MUTATED_LABELS if labels is None else labels}
    if annotations is not False:
        meta["annotations"] = MUTATED_ANNOTATIONS if annotations is None else annotations
    s: dict[str, Any] = {"schedulerName": "nonExistSchedulerName", "priority": 5999}
    if init is not None:
        s["initContainers"] = [{"name": "test-init-container-a", "resources": init}]
    s["containers"] = [{"name": "test-container-a", "resources": main}]
    if overhead is not None:
        s["overhead"] = overhead
    s.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": s}


# (name, pod, profile, draw, args, expected pod) — Koordinator's TestClusterColocationProfileMutatingPod
MUTATING_CASES = [
    ("mutating pod", base_pod(), base_profile(), None, ColocationProfileArgs(), expected(**MUTATED_SPEC)),
    ("set default request to the limit",
     {**base_pod(), "spec": {"containers": [{"name": "test-container-a", "resources": {"limits": res("1", "4Gi")}}],
                             "schedulerName": "nonExistSchedulerName", "priority": 5999}},
     base_profile(), None, ColocationProfileArgs(), expected(init=None, overhead=None, **MUTATED_SPEC)),
    ("keep limit unset",
     {**base_pod(), "spec": {"containers": [{"name": "test-container-a", "resources": {"requests": res("1", "4Gi")}}],
                             "schedulerName": "nonExistSchedulerName", "priority": 5999}},
     base_profile(), None, ColocationProfileArgs(),
     expected(init=None, overhead=None, main={"requests": {BATCH_CPU: "1k", BATCH_MEMORY: "4Gi"}}, **MUTATED_SPEC)),
    ("mutating pod, percent 100", base_pod(), base_profile(probability=100), None, ColocationProfileArgs(),
     expected(**MUTATED_SPEC)),
    ("mutating pod, percent 0", base_pod(), base_profile(probability=0), None, ColocationProfileArgs(),
     expected(labels={"koordinator-colocation-pod": "true"}, annotations=False)),
    ("mutating pod, percent 50, rand=70", base_pod(), base_profile(probability=50), 70, ColocationProfileArgs(),
     expected(labels={"koordinator-colocation-pod": "true"}, annotations=False)),
    ("mutating pod, percent 50, rand=30", base_pod(), base_profile(probability=50), 30, ColocationProfileArgs(),
     expected(**MUTATED_SPEC)),
    ("mutating pod, skip update resource by profile annotation", base_pod(),
     base_profile(annotations={"config.koordinator.sh/skip-update-resources": "true"}), None, ColocationProfileArgs(),
     {**expected(**MUTATED_SPEC), "spec": {**base_pod()["spec"], **MUTATED_SPEC}}),
    ("mutating pod, skip update resource by leveraging profile", base_pod(), base_profile(), None,
     ColocationProfileArgs(skip_mutating_resources=True),
     {**expected(**MUTATED_SPEC), "spec": {**base_pod()["spec"], **MUTATED_SPEC}}),
]


def _label_pod(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    pod = base_pod()
    pod["metadata"]["labels"] = {"koordinator-colocation-pod": "true", **labels}
    if annotations:
        pod["metadata"]["annotations"] = annotations
    return pod


MUTATING_CASES += [
    ("mutate pod labels according to labels", _label_pod({"label-key-to-load": "test-label-value"}),
     base_profile(labelKeysMapping={"label-key-to-load": "label-key-to-store"}), None, ColocationProfileArgs(),
     expected(labels={**MUTATED_LABELS, "label-key-to-load": "test-label-value",
                      "label-key-to-store": "test-label-value"}, **MUTATED_SPEC)),
    ("mutate pod labels according to labels 1", _label_pod({"label-key-to-load": "test-label-value"}),
     base_profile(labels={"testLabelA": "valueA", "koordinator.sh/scheduler-name": "koordinator-scheduler"},
                  labelKeysMapping={"label-key-to-load": "label-key-to-store",
                                    "label-key-to-load-not-exist": "label-key-to-store-not-exist"},
                  schedulerName=None), None, ColocationProfileArgs(),
     expected(labels={**MUTATED_LABELS, "label-key-to-load": "test-label-value", "label-key-to-store": "test-label-value",
                      "label-key-to-store-not-exist": "", "koordinator.sh/scheduler-name": "koordinator-scheduler"},
              **{**MUTATED_SPEC, "schedulerName": "nonExistSchedulerName"})),
    ("mutate pod annotations according to annotations",
     _label_pod({}, {"annotation-key-to-load": "test-annotation-value"}),
     base_profile(annotationKeysMapping={"annotation-key-to-load": "annotation-key-to-store"}), None,
     ColocationProfileArgs(),
     expected(annotations={**MUTATED_ANNOTATIONS, "annotation-key-to-load": "test-annotation-value",
                           "annotation-key-to-store": "test-annotation-value"}, **MUTATED_SPEC)),
    ("mutate pod labels with labels and suffixes",
     _label_pod({"label-key-to-load": "test-label-value", "label-key-1": "label-value-1"}),
     base_profile(labels={"testLabelA": "valueA", "koordinator.sh/scheduler-name": "koordinator-scheduler"},
                  labelKeysMapping={"label-key-to-load": "label-key-to-store",
                                    "label-key-to-load-not-exist": "label-key-to-store-not-exist"},
                  labelSuffixes={"label-key-1": "suffix", "label-key-to-store": "suffix-0",
                                 "suffix-label-key-1": "suffix-1"}, schedulerName=None),
     None, ColocationProfileArgs(),
     expected(labels={**MUTATED_LABELS, "label-key-1": "label-value-1suffix", "label-key-to-load": "test-label-value",
                      "label-key-to-store": "test-label-valuesuffix-0", "label-key-to-store-not-exist": "",
                      "koordinator.sh/scheduler-name": "koordinator-scheduler"},
              **{**MUTATED_SPEC, "schedulerName": "nonExistSchedulerName"})),
]


@pytest.mark.parametrize("name, pod, profile, draw, args, want", MUTATING_CASES, ids=[c[0] for c in MUTATING_CASES])
def test_mutating_cases(name, pod, profile, draw, args, want):
    profile = copy.deepcopy(profile)
    profile["spec"] = {k: v for k, v in profile["spec"].items() if v is not None}
    handle = FakeHandle(StaticObjects([NAMESPACE, BATCH_PC, profile]), draw=draw)
    got = apply_profiles(copy.deepcopy(pod), NAMESPACE, [parse_profile(profile)], handle, args)
    assert got == want


def test_no_matching_profile_leaves_even_a_batch_pod_alone():
    pod = base_pod()
    other_ns = {"metadata": {"name": "default", "labels": {}}}
    handle = FakeHandle(StaticObjects([BATCH_PC]))
    assert apply_profiles(copy.deepcopy(pod), other_ns, [parse_profile(base_profile())], handle,
                          ColocationProfileArgs()) == pod
    unlabelled = copy.deepcopy(pod)
    unlabelled["metadata"]["labels"] = {}
    assert apply_profiles(copy.deepcopy(unlabelled), NAMESPACE, [parse_profile(base_profile())], handle,
                          ColocationProfileArgs()) == unlabelled


def test_be_profile_without_priority_class_defaults_to_batch_and_mid_priority_becomes_mid_resources():
    be = base_profile(priorityClassName=None, patch=None, koordinatorPriority=None)
    be["spec"] = {k: v for k, v in be["spec"].items() if v is not None}
    pod = base_pod(priority=0)
    handle = FakeHandle(StaticObjects([BATCH_PC]))
    got = apply_profiles(pod, NAMESPACE, [parse_profile(be)], handle, ColocationProfileArgs())
    assert got["metadata"]["labels"][QOS] == "BE"
    assert got["spec"]["containers"][0]["resources"] == BATCH_MAIN
    mid = base_profile(qosClass="LS", priorityClassName=None, patch=None)
    mid["spec"] = {k: v for k, v in mid["spec"].items() if v is not None}
    got = apply_profiles(base_pod(priority=7500), NAMESPACE, [parse_profile(mid)], handle, ColocationProfileArgs())
    assert got["spec"]["containers"][0]["resources"] == {"limits": {MID_CPU: "1k", MID_MEMORY: "4Gi"},
                                                         "requests": {MID_CPU: "1k", MID_MEMORY: "4Gi"}}
    assert got["spec"]["overhead"] == {MID_CPU: "1k", MID_MEMORY: "2Gi"}
    prod = apply_profiles(base_pod(priority=9500), NAMESPACE, [parse_profile(mid)], handle, ColocationProfileArgs())
    assert prod["spec"]["containers"][0]["resources"]["requests"] == res("1", "4Gi")


def test_profiles_apply_in_name_order_and_missing_priority_class_is_an_error():
    a = base_profile("a-profile", labels={"order": "a"}, patch=None)
    b = base_profile("b-profile", labels={"order": "b"}, patch=None)
    handle = FakeHandle(StaticObjects([BATCH_PC]))
    got = apply_profiles(base_pod(), NAMESPACE, [parse_profile(b), parse_profile(a)], handle, ColocationProfileArgs())
    assert got["metadata"]["labels"]["order"] == "b"
    with pytest.raises(LookupError, match=r'spec.priorityClassName: priorityclasses.scheduling.k8s.io "koordinator-batch"'):
        apply_profiles(base_pod(), NAMESPACE, [parse_profile(a)], FakeHandle(StaticObjects()), ColocationProfileArgs())


@pytest.mark.parametrize("field, value, message", [
    ("probability", "half", "spec.probability"), ("qosClass", "GOLD", "spec.qosClass"),
    ("koordinatorPriority", "high", "spec.koordinatorPriority"), ("labels", {"a": 1}, "spec.labels.a"),
    ("patch", "x", "spec.patch"), ("selector", {"matchExpressions": [{"key": 1}]}, "spec.selector.matchExpressions[0]"),
])
def test_a_bad_profile_names_its_field(field, value, message):
    with pytest.raises(ManifestError, match=re.escape(f"ClusterColocationProfile test-profile: field {message}:")):
        parse_profile(base_profile(**{field: value}))


def test_percentage_probability_and_seeded_draws():
    prof = base_profile(probability="50%", patch=None)
    handle = FakeHandle(StaticObjects([BATCH_PC]), draw=51)
    assert QOS not in apply_profiles(base_pod(), NAMESPACE, [parse_profile(prof)], handle,
                                     ColocationProfileArgs())["metadata"]["labels"]
    handle.draw = 50  # rand.Intn(100) > percent skips: 50 is not above 50
    assert apply_profiles(base_pod(), NAMESPACE, [parse_profile(prof)], handle,
                          ColocationProfileArgs())["metadata"]["labels"][QOS] == "BE"


def test_strategic_merge_patch_merges_containers_by_name_and_deletes_with_null():
    pod = {"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
           "spec": {"containers": [{"name": "c1", "image": "i1", "env": [{"name": "E", "value": "1"}]},
                                   {"name": "c2", "image": "i2"}], "tolerations": [{"key": "k"}]}}
    patch = {"metadata": {"labels": {"b": None, "c": "3"}, "finalizers": ["y"]},
             "spec": {"containers": [{"name": "c1", "env": [{"name": "F", "value": "2"}]},
                                     {"name": "c2", "$patch": "delete"}, {"name": "c3", "image": "i3"}],
                      "tolerations": [{"key": "t", "operator": "Exists"}],
                      "nodeSelector": {"pool": "batch"}}}
    got = strategic_merge_pod(pod, patch)
    assert got["metadata"] == {"labels": {"a": "1", "c": "3"}, "finalizers": ["x", "y"]}
    assert got["spec"]["containers"] == [
        {"name": "c1", "image": "i1", "env": [{"name": "E", "value": "1"}, {"name": "F", "value": "2"}]},
        {"name": "c3", "image": "i3"}]
    assert got["spec"]["tolerations"] == [{"key": "t", "operator": "Exists"}]
    assert got["spec"]["nodeSelector"] == {"pool": "batch"}
    assert pod["metadata"]["labels"] == {"a": "1", "b": "2"}, "the input is not changed"
    assert strategic_merge_pod(pod, {"spec": {"$patch": "replace", "containers": []}})["spec"] == {"containers": []}


# -- the extended resource spec annotation (extended_resource_spec_test.go) ----------------------------------------


def _run(coro_fn):
    return anyio.run(coro_fn)


def admission(objects: list[dict], profile: dict | None = None, seed: int = 0) -> Admission:
    reg = build_registry({}, only=["colocation_profile"])
    return Admission(reg, StaticObjects(objects), clock=VirtualClock(0.0), seed=seed)


def test_extended_resource_spec_annotation_is_written_on_create_only():
    adm = admission([NAMESPACE, BATCH_PC, base_profile()])
    res_ = _run(lambda: adm.mutate(base_pod(), "CREATE"))
    assert res_.allowed
    spec = json.loads(res_.pod["metadata"]["annotations"][ANNOTATION_EXTENDED_RESOURCE_SPEC])
    assert spec == {"containers": {"test-container-a": BATCH_MAIN}}
    ops = {(op["op"], op["path"]) for op in res_.patch}
    assert ("replace", "/spec/schedulerName") in ops
    assert ("add", "/metadata/labels/koordinator.sh~1qosClass") in ops
    # the same pod again: the annotation already says it, nothing to patch
    again = _run(lambda: adm.mutate(res_.pod, "CREATE"))
    assert [op["path"] for op in again.patch if "annotations" in op["path"]] == []
    # Koordinator's mutating handler changes nothing on UPDATE
    changed = copy.deepcopy(base_pod())
    assert _run(lambda: adm.mutate(changed, "UPDATE")).patch == []
    # a pod with no batch resources gets nothing
    plain = {"metadata": {"name": "p", "namespace": "other"}, "spec": {"containers": [{"name": "c"}]}}
    assert _run(lambda: adm.mutate(plain, "CREATE")).patch == []


def test_a_malformed_extended_resource_spec_is_an_error_naming_the_annotation_and_plugin():
    adm = admission([NAMESPACE, BATCH_PC])
    pod = base_pod()
    pod["metadata"]["annotations"] = {ANNOTATION_EXTENDED_RESOURCE_SPEC: "{not json"}
    out = _run(lambda: adm.mutate(pod, "CREATE"))
    assert not out.allowed and out.code == 500 and out.plugin == "colocation_profile"
    assert ANNOTATION_EXTENDED_RESOURCE_SPEC in out.message


def test_seeded_probability_is_reproducible():
    objs = [NAMESPACE, BATCH_PC, base_profile(probability=50, patch=None)]

    def applied(seed: int) -> list[bool]:
        adm = admission(objs, seed=seed)
        return [QOS in _run(lambda: adm.mutate(base_pod(), "CREATE")).pod["metadata"]["labels"] for _ in range(40)]

    first = applied(7)
    assert first == applied(7)
    assert 5 < sum(first) < 35
    assert np.random.default_rng(7) is not None


# -- validating (TestClusterColocationProfileValidatingPod) --------------------------------------------------------


def vpod(labels: dict | None = None, priority: int | None = None, containers: list | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {"metadata": {"labels": labels} if labels is not None else {}, "spec": {}}
    if priority is not None:
        pod["spec"]["priority"] = priority
    if containers is not None:
        pod["spec"]["containers"] = containers
    return pod


BATCH_RES = [{"name": "test-container-a", "resources": {"limits": {BATCH_CPU: "1", BATCH_MEMORY: "4Gi"},
                                                         "requests": {BATCH_CPU: "1", BATCH_MEMORY: "4Gi"}}}]
ONE_CPU = [{"resources": {"requests": {"cpu": "1"}}}]

VALIDATING_CASES = [
    ("non-colocation empty pod", "CREATE", None, vpod(), False, None),
    ("validate immutable QoS", "UPDATE", vpod({QOS: "BE"}), vpod({QOS: "LS"}), False,
     'labels.koordinator.sh/qosClass: Invalid value: "LS": field is immutable'),
    ("validate remove QoS", "UPDATE", vpod({QOS: "BE"}), vpod(), False,
     'labels.koordinator.sh/qosClass: Invalid value: "": field is immutable'),
    ("validate defined QoS", "CREATE", None, vpod({QOS: "BE"}, 5000, BATCH_RES), False, None),
    ("forbidden not defined QoS", "CREATE", None, vpod(None, 6666, BATCH_RES), False,
     "labels.koordinator.sh/qosClass: Required value: must specify koordinator QoS BE with koordinator colocation resources"),
    ("validate immutable priorityClass", "UPDATE", vpod(priority=5000), vpod(priority=9999), False,
     'spec.priority: Invalid value: "koord-prod": field is immutable'),
    ("validate remove priorityClass", "UPDATE", vpod(priority=5000), vpod(), False,
     'spec.priority: Invalid value: "": field is immutable'),
    ("validate koordinator priority with defaultSkipValidatingPriority=false", "UPDATE", vpod({PRIO: "9999"}),
     vpod({PRIO: "8888"}), False, 'labels.koordinator.sh/priority: Invalid value: "8888": field is immutable'),
    ("validate koordinator priority with defaultSkipValidatingPriority=true", "UPDATE", vpod({PRIO: "9999"}),
     vpod({PRIO: "8888"}), True, None),
    ("validate remove koordinator priority", "UPDATE", vpod({PRIO: "9999"}), vpod(), False,
     'labels.koordinator.sh/priority: Invalid value: "": field is immutable'),
    ("allowed QoS and priorityClass combination: BE And NonProd", "CREATE", None, vpod({QOS: "BE"}, 5000), False, None),
    ("allowed QoS and priorityClass combination: LSR And Prod", "CREATE", None, vpod({QOS: "LSR"}, 9999, ONE_CPU),
     False, None),
    ("forbidden QoS and priorityClass combination: BE And Prod", "CREATE", None, vpod({QOS: "BE"}, 9999), False,
     "Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be used in combination"),
    ("forbidden QoS and priorityClass combination: LSR And Batch", "CREATE", None, vpod({QOS: "LSR"}, 5999, ONE_CPU),
     False, "Pod: Forbidden: koordinator.sh/qosClass=LSR and priorityClass=koord-batch cannot be used in combination"),
    ("forbidden QoS and priorityClass combination: LSR And Mid", "CREATE", None, vpod({QOS: "LSR"}, 7999, ONE_CPU),
     False, "Pod: Forbidden: koordinator.sh/qosClass=LSR and priorityClass=koord-mid cannot be used in combination"),
    ("forbidden QoS and priorityClass combination: LSR And Free", "CREATE", None, vpod({QOS: "LSR"}, 3999, ONE_CPU),
     False, "Pod: Forbidden: koordinator.sh/qosClass=LSR and priorityClass=koord-free cannot be used in combination"),
    ("validate resources - LSR And Prod", "CREATE", None,
     vpod({QOS: "LS"}, 9999, [{"resources": {"limits": res("1", "4Gi"), "requests": res("1", "4Gi")}}]), False, None),
    ("forbidden resources - LSR And Prod: unset CPUs", "CREATE", None,
     vpod({QOS: "LSR"}, 9999, [{"name": "test-container-skip", "resources": {"limits": {"memory": "4Gi"},
                                                                             "requests": {"memory": "0Gi"}}}]), False,
     "pod.spec.containers[*].resources.requests: Required value: LSR Pod must declare the requested CPUs"),
    ("forbidden resources - LSR And Prod: non-integer CPUs", "CREATE", None,
     vpod({QOS: "LSR"}, 9999, [{"name": "test-container-skip", "resources": {"limits": res("100m", "4Gi"),
                                                                             "requests": res("100m", "0Gi")}}]), False,
     'pod.spec.containers[*].resources.requests: Invalid value: "100m": the requested CPUs of LSR Pod must be integer'),
]


@pytest.mark.parametrize("name, op, old, new, skip_priority, reason", VALIDATING_CASES,
                         ids=[c[0] for c in VALIDATING_CASES])
def test_validating_cases(name, op, old, new, skip_priority, reason):
    errs = validation_errors(new, old, op, ColocationProfileArgs(skip_validating_priority=skip_priority))
    assert (aggregate(errs) if errs else None) == reason


def test_several_errors_are_aggregated_in_brackets():
    errs = validation_errors(vpod({QOS: "BE"}, 9999, BATCH_RES), vpod({QOS: "LS"}, 9999, BATCH_RES), "UPDATE",
                             ColocationProfileArgs())
    assert aggregate(errs) == ('[labels.koordinator.sh/qosClass: Invalid value: "BE": field is immutable, '
                               "Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be "
                               "used in combination]")


def test_admission_rejects_with_the_validating_reason_after_mutation():
    # a BE profile without a priority class on a pod of priority 0: converted to batch, then refused (BE + none)
    prof = base_profile(priorityClassName=None, patch=None, koordinatorPriority=None)
    prof["spec"] = {k: v for k, v in prof["spec"].items() if v is not None}
    adm = admission([NAMESPACE, prof])
    out = _run(lambda: adm.admit(base_pod(priority=0), "CREATE"))
    assert not out.allowed and out.code == 403 and out.plugin == "colocation_profile"
    assert out.message == ("Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass= cannot be used in "
                           "combination")
    ok = _run(lambda: admission([NAMESPACE, BATCH_PC, base_profile()]).admit(base_pod(), "CREATE"))
    assert ok.allowed and ok.patch
