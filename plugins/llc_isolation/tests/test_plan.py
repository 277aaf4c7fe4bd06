"""Table tests of the planner and of whole rounds (collect → plan → executor) against the fake tree."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import attrs
import pytest
from koordfw_llc_isolation.config import LLCIsolationArgs, ResctrlQOS
from koordfw_llc_isolation.plan import (
    ANNOTATION_RESCTRL,
    PodTasks,
    info_from_state,
    plan,
    pod_annotation_target,
    stale_pod_groups,
)
from koordfw_llc_isolation.plugin import LLCIsolation
from koordfw_llc_isolation.resctrl import AMD, INTEL, GroupState, ResctrlError, ResctrlInfo

from koordfw.core.errors import ConfigError
from koordfw.core.model import make_pod
from koordfw.core.nodestate import NodeState, PodState
from koordfw.core.nodestate import ResctrlInfo as StateResctrlInfo
from koordfw.core.profile import structure_args
from koordfw.core.stash import Stash
from koordfw.testing.resctrl import FakeResctrl, KernelExecutor

INFO = ResctrlInfo(cbm_mask="7ff", min_cbm_bits=1, num_closids=16, cache_ids=(0, 1), vendor=INTEL, mba=True)
ALL_ON = LLCIsolationArgs(LSR=ResctrlQOS(enable=True), LS=ResctrlQOS(enable=True), BE=ResctrlQOS(enable=True))


def wire(writes):
    return [(w.path, w.value, w.fs, w.mkdir) for w in writes]


# -- config ----------------------------------------------------------------------------------------


def test_args_from_profile_keys():
    args = structure_args("llc_isolation", LLCIsolationArgs, {
        "resctrlRoot": "/mnt/resctrl",
        "BE": {"enable": True, "catRangeStartPercent": 10, "catRangeEndPercent": 50, "mbaPercent": 85},
        "LS": {"enable": True}})
    assert args.resctrl_root == "/mnt/resctrl"
    be, ls, lsr = args.settings("BE"), args.settings("LS"), args.settings("LSR")
    assert (be.enable, be.start, be.end, be.mba_percent) == (True, 10, 50, 85)
    assert (ls.enable, ls.start, ls.end, ls.mba_percent) == (True, 0, 100, 100)
    assert not lsr.enable


def test_defaults_are_koordinators():
    a = LLCIsolationArgs()
    assert [(s.enable, s.start, s.end, s.mba_percent) for s in map(a.settings, ("LSR", "LS", "BE"))] == [
        (False, 0, 100, 100), (False, 0, 100, 100), (False, 0, 30, 100)]


@pytest.mark.parametrize("raw, message", [
    ({"BE": {"enable": "false"}}, "enable must be true or false"),
    ({"BE": {"catRangeEndPercent": 130}}, "catRangeEndPercent must be an integer percentage"),
    ({"BE": {"mbaPercent": -1}}, "mbaPercent must be an integer percentage"),
    ({"LS": {"catRangeStartPercent": 60, "catRangeEndPercent": 40}}, "must be greater than"),
    ({"BE": {"catRangeEnd": 30}}, "catRangeEnd"),
    ({"GOLD": {}}, "GOLD"),
])
def test_bad_args_name_the_field(raw, message):
    with pytest.raises(ConfigError) as e:
        structure_args("llc_isolation", LLCIsolationArgs, raw)
    assert message in str(e.value) and "llc_isolation" in str(e.value)


# -- the planner (pure) ----------------------------------------------------------------------------


@pytest.mark.parametrize("name, info, args, want", [
    ("defaults: nothing enabled, nothing written", INFO, LLCIsolationArgs(), []),
    ("BE only, 11 ways, Intel", INFO, LLCIsolationArgs(BE=ResctrlQOS(enable=True)), [
        ("BE/schemata", "L3:0=f;1=f;\n", "resctrl", True),
        ("BE/schemata", "MB:0=100;1=100;\n", "resctrl", True)]),
    ("all classes, BE throttled to 45% → 50", INFO,
     LLCIsolationArgs(LSR=ResctrlQOS(enable=True), LS=ResctrlQOS(enable=True, cat_range_start_percent=10),
                      BE=ResctrlQOS(enable=True, mba_percent=45)), [
        ("LSR/schemata", "L3:0=7ff;1=7ff;\n", "resctrl", True),
        ("LSR/schemata", "MB:0=100;1=100;\n", "resctrl", True),
        ("LS/schemata", "L3:0=7fc;1=7fc;\n", "resctrl", True),
        ("LS/schemata", "MB:0=100;1=100;\n", "resctrl", True),
        ("BE/schemata", "L3:0=f;1=f;\n", "resctrl", True),
        ("BE/schemata", "MB:0=50;1=50;\n", "resctrl", True)]),
    ("AMD, 16 ways, 4 CCX, BE at 50% bandwidth",
     ResctrlInfo(cbm_mask="ffff", cache_ids=(0, 1, 2, 3), vendor=AMD, mba=True, mba_gran=1),
     LLCIsolationArgs(BE=ResctrlQOS(enable=True, mba_percent=50)), [
        ("BE/schemata", "L3:0=1f;1=1f;2=1f;3=1f;\n", "resctrl", True),
        ("BE/schemata", "MB:0=80;1=80;2=80;3=80;\n", "resctrl", True)]),
    ("no MBA: only L3 lines", ResctrlInfo(cbm_mask="fffff", cache_ids=(0,), mba=False),
     LLCIsolationArgs(BE=ResctrlQOS(enable=True, cat_range_end_percent=50)), [
        ("BE/schemata", "L3:0=3ff;\n", "resctrl", True)]),
])
def test_plan_class_groups(name, info, args, want):
    result = plan(info, args, [])
    assert wire(result.writes) == want, name
    assert result.problems == []


@pytest.mark.parametrize("pods, want_tasks", [
    ([PodTasks("u-be", "BE", tasks=frozenset({30, 31}))], [("BE/tasks", "30"), ("BE/tasks", "31")]),
    ([PodTasks("u-lse", "LSE", tasks=frozenset({5})), PodTasks("u-lsr", "LSR", tasks=frozenset({6}))],
     [("LSR/tasks", "5"), ("LSR/tasks", "6")]),
    ([PodTasks("u-ls", "LS", tasks=frozenset({7}))], [("LS/tasks", "7")]),
    ([PodTasks("u-sys", "SYSTEM", tasks=frozenset({8})), PodTasks("u-none", "", tasks=frozenset({9}))], []),
    ([PodTasks("u-done", "BE", tasks=frozenset({10}), active=False)], []),
])
def test_plan_task_assignment(pods, want_tasks):
    writes = plan(INFO, ALL_ON, pods).writes
    assert [(w.path, w.value) for w in writes if w.path.endswith("/tasks")] == want_tasks


def test_plan_disabled_class_moves_nothing():
    args = LLCIsolationArgs(BE=ResctrlQOS(enable=True))
    writes = plan(INFO, args, [PodTasks("a", "LS", tasks=frozenset({1})), PodTasks("b", "BE", tasks=frozenset({2}))]).writes
    assert [w.path for w in writes] == ["BE/schemata", "BE/schemata", "BE/tasks"]


def test_plan_invalid_class_range_is_a_problem_not_a_crash():
    info = ResctrlInfo(cbm_mask="7ff", min_cbm_bits=4, cache_ids=(0,), mba=False)
    args = LLCIsolationArgs(LS=ResctrlQOS(enable=True), BE=ResctrlQOS(enable=True, cat_range_end_percent=20))
    result = plan(info, args, [PodTasks("b", "BE", tasks=frozenset({2}))])
    assert [w.path for w in result.writes] == ["LS/schemata"]
    assert len(result.problems) == 1
    assert "pluginConfig.llc_isolation.BE" in result.problems[0] and "min_cbm_bits=4" in result.problems[0]


@pytest.mark.parametrize("annotation, l3, mb", [
    ({"llc": {"schemata": {"range": [0, 30]}}}, {0: 0xf, 1: 0xf}, None),
    ({"llc": {"schemata": {"range": [0, 30]}, "schemataPerCache": [{"cacheid": 1, "range": [20, 50]}]},
      "mb": {"schemata": {"percent": 20}, "schemataPerCache": [{"cacheid": 0, "percent": 35}]}},
     {0: 0xf, 1: 0x38}, {0: 40, 1: 20}),
    ({"mb": {"schemataPerCache": [{"cacheid": 1, "percent": 50}]}}, {0: 0x7ff, 1: 0x7ff}, {0: 100, 1: 50}),
    ({}, {0: 0x7ff, 1: 0x7ff}, None),
])
def test_pod_annotation(annotation, l3, mb):
    assert pod_annotation_target(json.dumps(annotation), INFO) == (l3, mb)


@pytest.mark.parametrize("raw, message", [
    ("{not json", "not valid JSON"),
    ("[1]", "expected a JSON object"),
    ('{"llc": {"schemata": {"range": [50, 10]}}}', "llc.schemata: invalid L3 CAT range"),
    ('{"llc": {"schemata": {"range": [10]}}}', "llc.schemata.range: expected [startPercent, endPercent]"),
    ('{"llc": {"schemataPerCache": [{"cacheid": 7, "range": [0, 10]}]}}', "cacheid: 7 is not an L3 cache id"),
    ('{"mb": {"schemata": {"percent": "20"}}}', "mb.schemata.percent: expected an integer"),
    ('{"l3": {}}', "unknown field(s) ['l3']"),
])
def test_pod_annotation_invalid(raw, message):
    with pytest.raises(ResctrlError) as e:
        pod_annotation_target(raw, INFO)
    assert message in str(e.value)


def test_plan_pod_level_groups():
    pods = [
        PodTasks("p1", "LS", {ANNOTATION_RESCTRL: '{"llc": {"schemata": {"range": [0, 50]}}}'}, frozenset({3}), "ns/a"),
        PodTasks("p2", "BE", {ANNOTATION_RESCTRL: "{oops"}, frozenset({4}), "ns/b"),
        PodTasks("p3", "LS", {}, frozenset({5}), "ns/c"),
    ]
    result = plan(INFO, LLCIsolationArgs(), pods)
    assert wire(result.writes) == [
        ("koordlet-p1/schemata", "L3:0=3f;1=3f;\n", "resctrl", True),
        ("koordlet-p1/tasks", "3", "resctrl", True)]
    assert result.problems == [f"pod ns/b: annotation {ANNOTATION_RESCTRL}: not valid JSON "
                               "(invalid JSON at line 1, column 2: Expecting property name enclosed in double quotes); "
                               "pod left unchanged"]


def test_plan_respects_closids():
    info = ResctrlInfo(cbm_mask="7ff", num_closids=3, cache_ids=(0,), mba=False)
    pods = [PodTasks(f"p{i}", "LS", {ANNOTATION_RESCTRL: "{}"}, frozenset()) for i in range(2)]
    result = plan(info, LLCIsolationArgs(BE=ResctrlQOS(enable=True)), pods)
    assert sorted({w.path.split("/")[0] for w in result.writes}) == ["BE", "koordlet-p0"]
    assert result.problems == ["resctrl group koordlet-p1: no free CLOSID (numClosids=3); not created"]


def test_info_from_agent_state():
    st = StateResctrlInfo(cbm_mask="7ff", min_cbm_bits=2, num_closids=16, cache_ids=(1, 0), vendor="intel",
                          mba={"bandwidthGran": 10, "minBandwidth": 10, "numClosids": 8})
    assert info_from_state(st) == ResctrlInfo(cbm_mask="7ff", min_cbm_bits=2, num_closids=8, cache_ids=(0, 1),
                                              vendor=INTEL, mba=True, mba_gran=10, mba_min=10)
    assert info_from_state({"cbmMask": "ffff", "cacheIds": [0], "vendor": AMD, "mba": True}).vendor == AMD
    with pytest.raises(ResctrlError, match="cacheIds"):
        info_from_state({"cbmMask": "ffff", "cacheIds": []})


# -- whole rounds: collect → plan → executor → the fake kernel --------------------------------------


UIDS = {"lsr": "11111111-0000-0000-0000-000000000001", "ls": "22222222-0000-0000-0000-000000000002",
        "be": "33333333-0000-0000-0000-000000000003", "pod": "44444444-0000-0000-0000-000000000004"}


class Node:
    """A fake node: a resctrl tree, a cgroup v1 tree with the pods' containers, and the agent's view."""

    def __init__(self, tmp_path: Path, **fake_kw):
        pids = {"lsr": [100, 101], "ls": [200], "be": [300, 301, 302], "pod": [400]}
        self.fake = FakeResctrl(tmp_path / "resctrl", pids=[1] + [p for v in pids.values() for p in v], **fake_kw)
        self.cgroot = tmp_path / "cgroup"
        self.pods = []
        spec = {"lsr": ("LSR", "Guaranteed", ""), "ls": ("LS", "Burstable", "burstable/"),
                "be": ("BE", "BestEffort", "besteffort/"), "pod": ("LS", "Burstable", "burstable/")}
        for key, (qos, kube_qos, sub) in spec.items():
            uid = UIDS[key]
            d = f"kubepods/{sub}pod{uid}"
            self.write_tasks(d + "/c1", pids[key][:1])
            self.write_tasks(d + "/c2", pids[key][1:])
            ann = {}
            if key == "pod":
                ann = {ANNOTATION_RESCTRL: json.dumps({"llc": {"schemata": {"range": [50, 100]}},
                                                       "mb": {"schemata": {"percent": 30}}})}
            pod = make_pod(key, "default", labels={"koordinator.sh/qosClass": qos}, annotations=ann)
            pod = attrs.evolve(pod, uid=uid, phase="Running")
            self.pods.append(PodState(uid=uid, pod=pod, qos=qos, kube_qos=kube_qos, cgroup_dir=d))
        # an AgentHandle (every member of the protocol; apply is set by the tests that restore)
        self.handle = SimpleNamespace(plugin_name="llc_isolation", args=None, clock=None, now=lambda: 0.0, stash=Stash(),
                                      node_state=None, events=None, apply=None,
                                      roots={"resctrl": str(self.fake.root), "cgroup": str(self.cgroot),
                                             "proc": str(self.fake.proc_root)})
        self.executor = KernelExecutor(self.fake, {"resctrl": self.fake.root, "cgroup": self.cgroot})

    def write_tasks(self, rel_dir: str, pids) -> None:
        d = self.cgroot / "cpu" / rel_dir
        d.mkdir(parents=True, exist_ok=True)
        (d / "tasks").write_text("".join(f"{p}\n" for p in pids))

    def round(self, plugin: LLCIsolation, args: LLCIsolationArgs):
        state = NodeState(name="n1", pods=tuple(self.pods))
        state.metrics.update(plugin.collect(node_state=state, args=args, handle=self.handle) or {})
        writes = plugin.qos_plan(node_state=state, args=args, handle=self.handle) or []
        results, errors = self.fake.apply(self.executor, writes)
        return writes, results, errors, state


def test_round_creates_groups_assigns_tasks_and_is_idempotent(tmp_path):
    node = Node(tmp_path)
    plugin = LLCIsolation()
    args = ALL_ON
    plugin.startup(args=args, handle=node.handle)
    writes, results, errors, _ = node.round(plugin, args)
    assert errors == []
    assert {r.outcome for r in results} == {"written"}
    fake = node.fake
    assert fake.groups() == ["", "BE", "LS", "LSR", f"koordlet-{UIDS['pod']}"]
    assert fake.schemata("BE") == {"L3": {0: 0xf, 1: 0xf}, "MB": {0: 100, 1: 100}}
    assert fake.schemata("LSR") == {"L3": {0: 0x7ff, 1: 0x7ff}, "MB": {0: 100, 1: 100}}
    assert fake.schemata(f"koordlet-{UIDS['pod']}") == {"L3": {0: 0x7c0, 1: 0x7c0}, "MB": {0: 30, 1: 30}}
    assert (fake.tasks("LSR"), fake.tasks("LS"), fake.tasks("BE")) == ({100, 101}, {200}, {300, 301, 302})
    assert fake.tasks(f"koordlet-{UIDS['pod']}") == {400}
    assert fake.tasks("") == {1}
    assert (fake.root / "BE" / "schemata").read_text() == "L3:0=00f;1=00f\nMB:0=100;1=100\n"

    # a second round writes nothing
    writes2, _, _, _ = node.round(plugin, args)
    assert writes2 == []

    # a new process in a BE container (started in the root group) is moved on the next round
    fake.spawn(303)
    node.write_tasks(f"kubepods/besteffort/pod{UIDS['be']}/c2", [301, 302, 303])
    writes3, _, errors3, _ = node.round(plugin, args)
    assert [(w.path, w.value) for w in writes3] == [("BE/tasks", "303")]
    assert errors3 == [] and 303 in fake.tasks("BE")
    assert node.round(plugin, args)[0] == []


def test_round_tolerates_vanished_tasks(tmp_path):
    node = Node(tmp_path, mba=False)
    plugin = LLCIsolation()
    args = LLCIsolationArgs(BE=ResctrlQOS(enable=True))
    node.fake.exit(302)  # ended after the cgroup was read
    writes, results, errors, _ = node.round(plugin, args)
    assert node.fake.tasks("BE") == {300, 301}
    assert [e[1] for e in errors] == ["tasks"] and "No task 302" in errors[0][2]
    # the cgroup no longer lists it either: nothing left to do
    node.write_tasks(f"kubepods/besteffort/pod{UIDS['be']}/c2", [301])
    assert node.round(plugin, args)[0] == []


def test_config_change_rewrites_only_the_changed_line(tmp_path):
    node = Node(tmp_path)
    plugin = LLCIsolation()
    node.round(plugin, ALL_ON)
    args = LLCIsolationArgs(LSR=ResctrlQOS(enable=True), LS=ResctrlQOS(enable=True),
                            BE=ResctrlQOS(enable=True, mba_percent=20))
    writes, _, errors, _ = node.round(plugin, args)
    assert [(w.path, w.value) for w in writes] == [("BE/schemata", "MB:0=20;1=20;\n")]
    assert errors == [] and node.fake.schemata("BE") == {"L3": {0: 0xf, 1: 0xf}, "MB": {0: 20, 1: 20}}


def test_collect_reads_mon_data_per_class(tmp_path):
    node = Node(tmp_path)
    plugin = LLCIsolation()
    node.round(plugin, ALL_ON)
    node.fake.set_mon("BE", {0: {"llc_occupancy": 4096, "mbm_total_bytes": 10}, 1: {"llc_occupancy": 4096}})
    _, _, _, state = node.round(plugin, ALL_ON)
    assert state.metrics["resctrl.BE.llc_occupancy"] == 8192
    assert state.metrics["resctrl.BE.mbm_total_bytes"] == 10
    assert state.metrics["resctrl.LS.llc_occupancy"] == 0


def test_unsupported_machine_stays_idle_and_says_why_once(tmp_path, capsys):
    plugin = LLCIsolation()
    handle = SimpleNamespace(roots={"resctrl": str(tmp_path / "no-resctrl")})
    state = NodeState(name="n1", pods=(PodState(uid="u", qos="BE", cgroup_dir="kubepods/besteffort/podu"),))
    plugin.startup(args=ALL_ON, handle=handle)
    for _ in range(3):
        assert plugin.collect(node_state=state, args=ALL_ON, handle=handle) is None
        assert plugin.qos_plan(node_state=state, args=ALL_ON, handle=handle) is None
    out = capsys.readouterr()
    text = out.out + out.err
    assert text.count("llc_isolation idle") == 1 and "not mounted" in text


async def test_shutdown_lifts_the_throttles(tmp_path):
    node = Node(tmp_path)
    plugin = LLCIsolation()
    plugin.startup(args=ALL_ON, handle=node.handle)
    node.round(plugin, ALL_ON)
    assert node.fake.schemata("BE")["L3"] == {0: 0xf, 1: 0xf}

    async def apply(writes):
        return node.fake.apply(node.executor, writes)[0]

    node.handle.apply = apply
    await plugin.shutdown(args=ALL_ON, handle=node.handle)
    assert node.fake.schemata("BE") == {"L3": {0: 0x7ff, 1: 0x7ff}, "MB": {0: 100, 1: 100}}
    assert node.fake.tasks("BE") == {300, 301, 302}  # placement stays
    pod_group = f"koordlet-{UIDS['pod']}"
    assert node.fake.schemata(pod_group)["L3"] == {0: 0x7c0, 1: 0x7c0}


# -- pod-level groups of pods that left ------------------------------------------------------------


ANNOTATED = {ANNOTATION_RESCTRL: "{}"}


@pytest.mark.parametrize("name, pods, observed, want", [
    ("no snapshot, nothing known to remove", [], None, []),
    ("the pod left", [], ["koordlet-gone"], ["koordlet-gone"]),
    ("the pod is here with the annotation", [PodTasks("u1", "LS", ANNOTATED)], ["koordlet-u1"], []),
    ("a bad annotation leaves the pod unchanged", [PodTasks("u1", "LS", {ANNOTATION_RESCTRL: "{oops"})],
     ["koordlet-u1"], []),
    ("a finished pod still on the node keeps it", [PodTasks("u1", "LS", ANNOTATED, active=False)],
     ["koordlet-u1"], []),
    ("the annotation was dropped (Koordinator removes it too)", [PodTasks("u1", "LS", {})], ["koordlet-u1"],
     ["koordlet-u1"]),
    ("manifest unknown: cannot tell, kept", [PodTasks("u1", "", {}, known=False)], ["koordlet-u1"], []),
    ("never the root, class groups or other groups", [],
     ["", "LSR", "LS", "BE", "other", "koordlet-", "koordlet"], []),
    ("several, sorted", [PodTasks("b", "LS", ANNOTATED)], ["koordlet-c", "koordlet-b", "koordlet-a"],
     ["koordlet-a", "koordlet-c"]),
])
def test_stale_pod_groups(name, pods, observed, want):
    obs = None if observed is None else {g: GroupState() for g in observed}
    assert stale_pod_groups(pods, obs) == want
    result = plan(INFO, LLCIsolationArgs(), pods, observed=obs)
    removals = [w for w in result.writes if w.rmdir]
    assert [(w.path, w.fs, w.plugin) for w in removals] == [(g, "resctrl", "llc_isolation") for g in want]
    assert result.removed == want


def test_removals_come_after_the_writes_moving_tasks_out():
    """A pod that dropped its annotation goes back to its class group first, then its group is removed."""
    info = ResctrlInfo(cbm_mask="7ff", num_closids=16, cache_ids=(0,), mba=False)
    obs = {"LS": GroupState({"L3": {0: 0x7ff}}), "koordlet-u1": GroupState({"L3": {0: 0x3f}}, frozenset({7}))}
    result = plan(info, LLCIsolationArgs(LS=ResctrlQOS(enable=True)), [PodTasks("u1", "LS", {}, frozenset({7}))],
                  observed=obs)
    assert [(w.path, w.value, w.rmdir) for w in result.writes] == [("LS/tasks", "7", False),
                                                                    ("koordlet-u1", "", True)]


def test_a_freed_closid_is_used_in_the_same_round_after_the_removal():
    info = ResctrlInfo(cbm_mask="7ff", num_closids=3, cache_ids=(0,), mba=False)  # root + 2 groups
    obs = {"BE": GroupState({"L3": {0: 0xf}}), "koordlet-old": GroupState({"L3": {0: 0x7ff}})}
    pods = [PodTasks("new", "LS", ANNOTATED, frozenset({9})), PodTasks("x", "BE", {}, frozenset())]
    result = plan(info, LLCIsolationArgs(BE=ResctrlQOS(enable=True)), pods, observed=obs)
    assert [(w.path, w.rmdir) for w in result.writes] == [
        ("koordlet-old", True), ("koordlet-new/schemata", False), ("koordlet-new/tasks", False)]
    assert result.problems == []
    # without the stale group there would be no room either way: the CLOSID count is honest
    full = {"BE": obs["BE"], "koordlet-busy": GroupState()}
    pods_busy = pods + [PodTasks("busy", "LS", ANNOTATED)]
    result = plan(info, LLCIsolationArgs(BE=ResctrlQOS(enable=True)), pods_busy, observed=full)
    assert result.problems == ["resctrl group koordlet-new: no free CLOSID (numClosids=3); not created"]


def _leave(node: Node, uid: str) -> None:
    """The pod ``uid`` leaves the node: its cgroup goes and the agent no longer lists it."""
    node.pods = [p for p in node.pods if p.uid != uid]
    for p in list((node.cgroot / "cpu" / "kubepods").rglob(f"pod{uid}")):
        for sub in sorted(p.rglob("*"), reverse=True):
            sub.unlink() if sub.is_file() else sub.rmdir()
        p.rmdir()


def _arrive(node: Node, uid: str, pids: list[int]) -> None:
    node.fake.spawn(*pids)
    d = f"kubepods/burstable/pod{uid}"
    node.write_tasks(d + "/c1", pids)
    pod = attrs.evolve(make_pod(f"new-{uid[:4]}", "default", labels={"koordinator.sh/qosClass": "LS"},
                                annotations={ANNOTATION_RESCTRL: '{"llc": {"schemata": {"range": [0, 50]}}}'}),
                       uid=uid, phase="Running")
    node.pods.append(PodState(uid=uid, pod=pod, qos="LS", kube_qos="Burstable", cgroup_dir=d))


def test_pod_leaves_its_group_is_removed_and_its_closid_reused(tmp_path):
    # root + BE + one pod-level group: every CLOSID is taken after the first round
    node = Node(tmp_path, num_closids=3, mba=False)
    plugin = LLCIsolation()
    args = LLCIsolationArgs(BE=ResctrlQOS(enable=True))
    plugin.startup(args=args, handle=node.handle)
    old = f"koordlet-{UIDS['pod']}"
    _, results, errors, _ = node.round(plugin, args)
    assert errors == [] and node.fake.groups() == ["", "BE", old]
    with pytest.raises(OSError, match="out of CLOSIDs"):  # the kernel would refuse a third group now
        node.fake.mkdir("probe")

    # the pod leaves: the next round removes its group through the executor's rmdir
    node.fake.exit(400)
    _leave(node, UIDS["pod"])
    writes, results, errors, _ = node.round(plugin, args)
    assert [(w.path, w.rmdir) for w in writes] == [(old, True)]
    assert [r.outcome for r in results] == ["removed"] and errors == []
    assert node.fake.groups() == ["", "BE"] and not (node.fake.root / old).exists()
    assert node.executor.stats.removed == 1
    assert node.round(plugin, args)[0] == []  # gone for good: nothing more to do

    # a new pod's group gets the CLOSID back
    new_uid = "55555555-0000-0000-0000-000000000005"
    _arrive(node, new_uid, [500])
    writes, results, errors, _ = node.round(plugin, args)
    assert errors == [] and {r.outcome for r in results} == {"written"}
    assert node.fake.groups() == ["", "BE", f"koordlet-{new_uid}"]
    assert node.fake.tasks(f"koordlet-{new_uid}") == {500}


def test_churn_in_one_round_frees_then_creates(tmp_path):
    """One pod leaves while another arrives on a full node: rmdir first, then the new group, same round."""
    node = Node(tmp_path, num_closids=3, mba=False)
    plugin = LLCIsolation()
    args = LLCIsolationArgs(BE=ResctrlQOS(enable=True))
    node.round(plugin, args)
    node.fake.exit(400)
    _leave(node, UIDS["pod"])
    new_uid = "66666666-0000-0000-0000-000000000006"
    _arrive(node, new_uid, [600])
    writes, results, errors, _ = node.round(plugin, args)
    assert [w.path for w in writes] == [f"koordlet-{UIDS['pod']}", f"koordlet-{new_uid}/schemata",
                                        f"koordlet-{new_uid}/tasks"]
    assert [r.outcome for r in results] == ["removed", "written", "written"] and errors == []
    assert node.fake.groups() == ["", "BE", f"koordlet-{new_uid}"]
    for i in range(5):  # many pods come and go: no CLOSID leaks
        node.fake.exit(600 + i)
        _leave(node, new_uid)
        new_uid = f"7777777{i}-0000-0000-0000-000000000007"
        _arrive(node, new_uid, [601 + i])
        _, results, errors, _ = node.round(plugin, args)
        assert errors == [] and node.fake.groups() == ["", "BE", f"koordlet-{new_uid}"]


def test_removal_dry_run_changes_nothing(tmp_path):
    node = Node(tmp_path, mba=False)
    plugin = LLCIsolation()
    args = LLCIsolationArgs()
    node.round(plugin, args)
    old = f"koordlet-{UIDS['pod']}"
    node.executor = KernelExecutor(node.fake, dict(node.executor.roots), dry_run=True)
    _leave(node, UIDS["pod"])
    writes, results, errors, _ = node.round(plugin, args)
    assert [(r.write.path, r.outcome) for r in results] == [(old, "dry_run")]
    assert old in node.fake.groups()


def test_only_pod_groups_are_ever_removed(tmp_path):
    """With every pod gone, the class groups and someone else's group stay; only koordlet-<uid> goes."""
    node = Node(tmp_path, mba=False)
    plugin = LLCIsolation()
    node.round(plugin, ALL_ON)
    node.fake.mkdir("someone-else")
    node.pods = []
    writes, results, errors, _ = node.round(plugin, LLCIsolationArgs())
    assert [(w.path, w.rmdir) for w in writes] == [(f"koordlet-{UIDS['pod']}", True)]
    assert node.fake.groups() == ["", "BE", "LS", "LSR", "someone-else"]


def test_no_rdt_nothing_changes_even_with_a_leftover_dir(tmp_path):
    plugin = LLCIsolation()
    root = tmp_path / "no-resctrl"
    (root / "koordlet-gone").mkdir(parents=True)  # not a resctrl mount: no schemata at the root
    handle = SimpleNamespace(roots={"resctrl": str(root)})
    state = NodeState(name="n1")
    plugin.startup(args=LLCIsolationArgs(), handle=handle)
    assert plugin.collect(node_state=state, args=LLCIsolationArgs(), handle=handle) is None
    assert plugin.qos_plan(node_state=state, args=LLCIsolationArgs(), handle=handle) is None
    assert (root / "koordlet-gone").is_dir()


@pytest.mark.parametrize("path, err", [
    ("", "EBUSY"), ("info", "EPERM"), ("info/L3", "EPERM"), ("mon_groups", "EPERM"), ("BE/mon_data", "EPERM"),
    ("missing", "ENOENT"), ("BE", None),
])
def test_fake_rmdir_has_the_kernels_semantics(tmp_path, path, err):
    import errno

    fake = FakeResctrl(tmp_path / "resctrl", pids=[1, 2], num_closids=2, mba=False)
    fake.mkdir("BE")
    fake.write("BE", "tasks", "2")
    target = fake.root / path if path else fake.root
    if err is None:
        fake.rmdir_path(target)
        assert fake.groups() == [""] and fake.tasks("") == {1, 2}  # tasks back in the root group
        assert not target.exists()
        fake.mkdir("LS")  # its CLOSID is free again
        return
    with pytest.raises(OSError) as e:
        fake.rmdir_path(target)
    assert errno.errorcode[e.value.errno] == err
    assert fake.groups() == ["", "BE"]
