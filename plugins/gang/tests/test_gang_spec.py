"""Table tests: Koordinator's gang definition parsing and its fallbacks (core/gang.go)."""

import pytest
from koordfw_gang.gang import (
    DEFAULT_TIMEOUT_SECONDS,
    Gang,
    GangDefinitionError,
    GangSpec,
    gang_id_of,
    parse_go_duration,
    spec_from_pod,
    spec_from_pod_group,
)

from koordfw.inputs import make_pod

G = "gang.scheduling.koordinator.sh"


@pytest.mark.parametrize("text,seconds", [
    ("30s", 30.0), ("1m30s", 90.0), ("1.5h", 5400.0), ("300ms", 0.3), ("2h45m", 9900.0), ("0", 0.0),
    ("-2s", -2.0), ("+5m", 300.0), ("1us", 1e-6), ("10ns", 1e-8),
])
def test_parse_go_duration(text, seconds):
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "30", "s", "1x", "1s2", "abc", "1 s"])
def test_parse_go_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_go_duration(text)


def _pod(ann=None, labels=None, ns="default"):
    return make_pod("p", ns, annotations=ann or {}, labels=labels or {})


@pytest.mark.parametrize("labels,ann,expected", [
    ({"pod-group.scheduling.sigs.k8s.io": "crd"}, {f"{G}/name": "ann"}, "default/crd"),
    ({"pod-group.scheduling.sigs.k8s.io/name": "old"}, {f"{G}/name": "ann"}, "default/old"),
    ({"pod-group.scheduling.sigs.k8s.io": "crd", "pod-group.scheduling.sigs.k8s.io/name": "old"}, {}, "default/crd"),
    ({}, {f"{G}/name": "ann"}, "default/ann"),
    ({}, {}, ""),
])
def test_gang_name_lookup_order(labels, ann, expected):
    assert gang_id_of(_pod(ann, labels)) == expected


CASES = [
    # (annotations beyond name, expected fields)
    ({"min-available": "3"}, dict(min_member=3, total_number=3, mode="Strict", wait_seconds=DEFAULT_TIMEOUT_SECONDS,
                                  groups=("default/g",), match_policy="once-satisfied")),
    ({"min-available": "3", "total-number": "5"}, dict(total_number=5)),
    ({"min-available": "3", "total-number": "2"}, dict(total_number=3)),       # < min → min
    ({"min-available": "3", "total-number": "0"}, dict(total_number=3)),       # 0 → min
    ({"min-available": "3", "total-number": "many"}, dict(total_number=3)),    # invalid → min
    ({"min-available": "3", "mode": "NonStrict"}, dict(mode="NonStrict")),
    ({"min-available": "3", "mode": "nonstrict"}, dict(mode="Strict")),        # anything else → Strict
    ({"min-available": "3", "waiting-time": "30s"}, dict(wait_seconds=30.0)),
    ({"min-available": "3", "waiting-time": "0s"}, dict(wait_seconds=DEFAULT_TIMEOUT_SECONDS)),
    ({"min-available": "3", "waiting-time": "-5s"}, dict(wait_seconds=DEFAULT_TIMEOUT_SECONDS)),
    ({"min-available": "3", "waiting-time": "soon"}, dict(wait_seconds=DEFAULT_TIMEOUT_SECONDS)),
    ({"min-available": "3", "groups": '["nsB/b","default/g"]'}, dict(groups=("default/g", "nsB/b"))),
    ({"min-available": "3", "groups": '["nsB/b"]'}, dict(groups=("default/g", "nsB/b"))),  # self added
    ({"min-available": "3", "groups": "nsB/b"}, dict(groups=("default/g",))),              # invalid JSON → [self]
    ({"min-available": "3", "match-policy": "only-waiting"}, dict(match_policy="only-waiting")),
    ({"min-available": "3", "match-policy": "waiting-and-running"}, dict(match_policy="waiting-and-running")),
    ({"min-available": "3", "match-policy": "bogus"}, dict(match_policy="once-satisfied")),
]


@pytest.mark.parametrize("extra,expected", CASES)
def test_spec_from_pod_annotations(extra, expected):
    ann = {f"{G}/name": "g", **{f"{G}/{k}": v for k, v in extra.items()}}
    spec = spec_from_pod(_pod(ann))
    for field, value in expected.items():
        assert getattr(spec, field) == value, field


def test_match_policy_alias_annotation():
    ann = {f"{G}/name": "g", f"{G}/min-available": "1",
           "pod-group.scheduling.sigs.k8s.io/match-policy": "only-waiting"}
    assert spec_from_pod(_pod(ann)).match_policy == "only-waiting"


def test_default_args_apply():
    ann = {f"{G}/name": "g", f"{G}/min-available": "1"}
    spec = spec_from_pod(_pod(ann), default_timeout=42.0, default_match_policy="only-waiting")
    assert (spec.wait_seconds, spec.match_policy) == (42.0, "only-waiting")


@pytest.mark.parametrize("ann", [{}, {f"{G}/min-available": "two"}, {f"{G}/min-available": "-1"}])
def test_gang_without_valid_min_never_initializes(ann):
    with pytest.raises(GangDefinitionError, match="min-available"):
        spec_from_pod(_pod({f"{G}/name": "g", **ann}))


def test_spec_from_pod_group():
    pg = {"metadata": {"name": "job", "namespace": "ml",
                       "annotations": {f"{G}/mode": "NonStrict", f"{G}/total-number": "6",
                                       f"{G}/groups": '["ml/job","ml/ps"]'}},
          "spec": {"minMember": 4, "scheduleTimeoutSeconds": 120}}
    spec = spec_from_pod_group("ml/job", pg)
    assert spec == GangSpec("ml/job", 4, 6, "NonStrict", 120.0, ("ml/job", "ml/ps"), "once-satisfied", "PodGroup")
    assert spec.group_id == "ml/job,ml/ps"


def test_pod_group_without_timeout_uses_default():
    assert spec_from_pod_group("a/b", {"spec": {"minMember": 2}}).wait_seconds == DEFAULT_TIMEOUT_SECONDS


def test_pod_group_bad_min_member_names_field():
    with pytest.raises(GangDefinitionError, match=r"PodGroup a/b: spec.minMember"):
        spec_from_pod_group("a/b", {"spec": {"minMember": "x"}})


PERMIT = [
    # policy, min, waiting, bound, once_satisfied, valid
    ("only-waiting", 3, 3, 0, False, True),
    ("only-waiting", 3, 2, 5, True, False),
    ("waiting-and-running", 3, 1, 2, False, True),
    ("waiting-and-running", 3, 1, 1, True, False),
    ("once-satisfied", 3, 3, 0, False, True),
    ("once-satisfied", 3, 0, 0, True, True),
    ("once-satisfied", 3, 2, 2, False, False),
]


@pytest.mark.parametrize("policy,min_member,waiting,bound,once,valid", PERMIT)
def test_valid_for_permit(policy, min_member, waiting, bound, once, valid):
    g = Gang("default/g", GangSpec("default/g", min_member, min_member, match_policy=policy, groups=("default/g",)),
             waiting={f"w{i}" for i in range(waiting)}, bound={f"b{i}" for i in range(bound)}, once_satisfied=once)
    assert g.valid_for_permit() is valid


def test_uninitialized_gang_is_never_valid():
    assert Gang("default/g").valid_for_permit() is False
