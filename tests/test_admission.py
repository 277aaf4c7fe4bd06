"""The pod admission hooks (``mutate_pod``, ``validate_pod``) through koordfw.core.admission.Admission:
profile order, each mutation on the previous result, the JSONPatch, failures naming the plugin."""

from __future__ import annotations

import json
from typing import Any

import anyio
import jsonpatch
import pytest

from koordfw import AdmissionHandle, Status, build_registry, hookimpl
from koordfw.core.admission import Admission, StaticObjects, json_patch
from koordfw.embed import VirtualClock

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team", "labels": {"app": "x"}},
       "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "labels": {"tier": "batch"}}}


class AddLabel:
    def __init__(self, key: str) -> None:
        self.key = key
        self.seen: list[dict] = []

    @hookimpl
    def mutate_pod(self, pod: dict, operation: str, namespace: dict | None, handle: AdmissionHandle) -> dict:
        assert isinstance(handle, AdmissionHandle)
        self.seen.append({"labels": dict(pod["metadata"]["labels"]), "op": operation, "ns": namespace})
        out = {**pod, "metadata": {**pod["metadata"], "labels": {**pod["metadata"]["labels"], self.key: "1"}}}
        return out


def run(registry_plugins: dict[str, Any], fn: Any, objects: list[dict] | None = None, profile: dict | None = None):
    reg = build_registry(profile or {}, plugins=registry_plugins, only=())
    adm = Admission(reg, StaticObjects(objects if objects is not None else [NS]), clock=VirtualClock(5.0), seed=3)
    return anyio.run(lambda: fn(adm))


def test_hook_mutate_pod_runs_in_profile_order_on_the_previous_result():
    a, b = AddLabel("a"), AddLabel("b")
    out = run({"first": a, "second": b}, lambda adm: adm.mutate(POD, "CREATE"))
    assert out.allowed and out.code == 200
    assert out.pod["metadata"]["labels"] == {"app": "x", "a": "1", "b": "1"}
    assert b.seen[0]["labels"] == {"app": "x", "a": "1"}, "the second plugin sees the first one's result"
    assert a.seen[0]["op"] == "CREATE" and a.seen[0]["ns"] == NS
    assert out.patch == [{"op": "add", "path": "/metadata/labels/a", "value": "1"},
                         {"op": "add", "path": "/metadata/labels/b", "value": "1"}]
    assert POD["metadata"]["labels"] == {"app": "x"}, "the original is not changed"
    # the profile reorders them
    a2, b2 = AddLabel("a"), AddLabel("b")
    prof = {"plugins": {"mutate_pod": {"disabled": [{"name": "*"}], "enabled": [{"name": "second"}, {"name": "first"}]}}}
    run({"first": a2, "second": b2}, lambda adm: adm.mutate(POD, "CREATE"), profile=prof)
    assert a2.seen[0]["labels"] == {"app": "x", "b": "1"}


def test_hook_mutate_pod_in_place_none_and_failures():
    class InPlace:
        @hookimpl
        def mutate_pod(self, pod: dict) -> dict:
            pod["spec"]["schedulerName"] = "koord-scheduler"
            return pod

    class Nothing:
        @hookimpl
        def mutate_pod(self, pod: dict) -> None:
            return None

    class Broken:
        @hookimpl
        def mutate_pod(self, pod: dict) -> dict:
            raise RuntimeError("boom")

    class Wrong:
        @hookimpl
        def mutate_pod(self, pod: dict) -> Any:
            return ["not", "a", "pod"]

    out = run({"inplace": InPlace(), "nothing": Nothing()}, lambda adm: adm.mutate(POD, "CREATE"))
    assert out.patch == [{"op": "add", "path": "/spec/schedulerName", "value": "koord-scheduler"}]
    bad = run({"inplace": InPlace(), "broken": Broken()}, lambda adm: adm.mutate(POD, "CREATE"))
    assert not bad.allowed and bad.code == 500 and bad.plugin == "broken" and "boom" in bad.message
    assert bad.patch == []
    wrong = run({"wrong": Wrong()}, lambda adm: adm.mutate(POD, "CREATE"))
    assert wrong.code == 500 and "plugin wrong returned list from mutate_pod" in wrong.message
    with pytest.raises(ValueError, match="invalid admission operation 'create'"):
        run({}, lambda adm: adm.mutate(POD, "create"))


def test_hook_validate_pod_reasons_statuses_and_errors():
    class Reject:
        @hookimpl
        def validate_pod(self, pod: dict, old: dict | None, operation: str) -> str | None:
            return "spec.priority: must be set" if "priority" not in pod["spec"] else None

    class Fine:
        @hookimpl
        def validate_pod(self, pod: dict) -> Status:
            return Status.success()

    class Raises:
        @hookimpl
        def validate_pod(self, pod: dict) -> None:
            raise KeyError("x")

    out = run({"fine": Fine(), "reject": Reject()}, lambda adm: adm.validate(POD, None, "CREATE"))
    assert not out.allowed and out.code == 403 and out.message == "spec.priority: must be set" and out.plugin == "reject"
    ok = run({"reject": Reject()}, lambda adm: adm.validate({**POD, "spec": {"priority": 1}}, POD, "UPDATE"))
    assert ok.allowed
    err = run({"raises": Raises()}, lambda adm: adm.validate(POD, None, "CREATE"))
    assert err.code == 500 and err.plugin == "raises"


def test_admit_validates_the_mutated_pod():
    class SetPriority:
        @hookimpl
        def mutate_pod(self, pod: dict) -> dict:
            pod["spec"]["priority"] = 5500
            return pod

    class NeedPriority:
        @hookimpl
        def validate_pod(self, pod: dict) -> str | None:
            return None if pod["spec"].get("priority") else "spec.priority: required"

    out = run({"set": SetPriority(), "need": NeedPriority()}, lambda adm: adm.admit(POD))
    assert out.allowed and out.patch == [{"op": "add", "path": "/spec/priority", "value": 5500}]
    refused = run({"need": NeedPriority()}, lambda adm: adm.admit(POD))
    assert not refused.allowed and refused.code == 403


def test_handle_rng_is_seeded_and_objects_are_in_name_order():
    draws: list[int] = []

    class Draw:
        @hookimpl
        def mutate_pod(self, pod: dict, handle: AdmissionHandle) -> None:
            draws.append(int(handle.rng.integers(1000)))
            names = [o["metadata"]["name"] for o in handle.objects("v1", "Namespace")]
            assert names == sorted(names)
            assert handle.get("v1", "Namespace", "team") == NS
            assert handle.now() == 5.0
            return None

    objs = [NS, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}]
    run({"draw": Draw()}, lambda adm: adm.mutate(POD, "CREATE"), objects=objs)
    run({"draw": Draw()}, lambda adm: adm.mutate(POD, "CREATE"), objects=objs)
    assert draws[0] == draws[1]


@pytest.mark.parametrize("original, result", [
    ({"a": {"b/c": "1", "d~e": 2}}, {"a": {"b/c": "2"}}),
    ({"l": [1, 2, 3]}, {"l": [1, 3, 4]}),
    ({"x": {"y": [{"n": 1}]}}, {"x": {"y": [{"n": 1, "m": 2}]}, "z": None}),
    ({"a": {"b": 1}}, {"a": {"b": True}}),
    ({"l": [1, 2]}, {"l": [True, 2, 3]}),
])
def test_json_patch_turns_the_original_into_the_result(original, result):
    ops = json_patch(original, result)
    out = jsonpatch.apply_patch(original, ops)
    assert json.dumps(out) == json.dumps(result)


def _random_json(rng, depth: int = 0):
    kind = rng.integers(6) if depth < 4 else rng.integers(3)
    if kind == 0:
        return int(rng.integers(-5, 5))
    if kind == 1:
        return ["a", "b/c", "d~e", ""][int(rng.integers(4))]
    if kind == 2:
        return None if rng.integers(2) else bool(rng.integers(2))
    if kind in (3, 4):
        return {["k", "x/y", "m~n", "z"][int(rng.integers(4))] + str(int(rng.integers(3))): _random_json(rng, depth + 1)
                for _ in range(int(rng.integers(4)))}
    return [_random_json(rng, depth + 1) for _ in range(int(rng.integers(4)))]


def test_json_patch_round_trips_on_seeded_random_documents():
    import numpy as np

    rng = np.random.default_rng(18)
    for _ in range(500):
        a, b = _random_json(rng), _random_json(rng)
        assert jsonpatch.apply_patch(a, json_patch(a, b)) == b
        assert json_patch(a, a) == []


def test_admit_without_the_patch_gives_the_same_pod():
    a, b = AddLabel("a"), AddLabel("b")
    full = run({"first": a, "second": b}, lambda adm: adm.admit(POD, "CREATE"))
    bare = run({"first": AddLabel("a"), "second": AddLabel("b")}, lambda adm: adm.admit(POD, "CREATE", patch=False))
    assert full.patch and bare.patch == []
    assert (bare.allowed, bare.code, bare.pod) == (full.allowed, full.code, full.pod)
