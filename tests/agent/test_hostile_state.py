"""Hostile node state files and agent inputs (issue 16): never a traceback, a hang or a blow-up.

One regression per class of problem with its minimal input (``koordfw agent plan --state F`` under
:func:`koordfw.testing.hostile.run_cli`), unit tests of the bounds (cpu lists, cgroup dirs, the
executor's path rule, the loop's interval), and a property test: node states generated from the schema
``NodeState.from_state_file`` accepts, mutated (types, non-finite and huge numbers, nesting, encodings,
duplicates), must give exit 0 or one error line naming the file. ``KOORDFW_FUZZ_EXAMPLES`` sets how many
examples (default 15; ``make fuzz`` sets more). The full catalog is ``test_hostile_catalog.py``.
"""

from __future__ import annotations

import copy
import json
import math
import os

import anyio
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koordfw.agent.executor import Executor, path_refusal
from koordfw.agent.loop import Agent, check_interval
from koordfw.core.errors import ManifestError
from koordfw.core.nodestate import MAX_CPUS, FileWrite, NodeState, check_cgroup_dir, parse_cpuset
from koordfw.core.plugins import Registry
from koordfw.testing.hostile import check_cli_outcome, run_cli

from .hostile_cases import (
    BASE,
    HUGE,
    NOTOPO,
    RESERVATION,
    doc,
    exec_cases,
    loop_survives_bad_input,
    nested,
    reservation,
    run_exec_case,
    text,
)

FUZZ_EXAMPLES = int(os.environ.get("KOORDFW_FUZZ_EXAMPLES", "15"))


@pytest.fixture(scope="module", autouse=True)
def _plugins_imported():
    Registry().load()  # import every plugin once in the parent, so each forked run is fast


def plan(tmp_path, content: bytes, *extra: str):
    state = tmp_path / "state.yaml"
    state.write_bytes(content)
    return str(state), run_cli(["agent", "plan", "--state", str(state), *extra], timeout=20)


def assert_error(tmp_path, content: bytes, *names: str, extra: tuple[str, ...] = ()) -> str:
    state, o = plan(tmp_path, content, *extra)
    assert check_cli_outcome(o, names=[state, *names], max_seconds=10) == "error", o.describe()
    return o.stderr


# -- one minimal input per class ---------------------------------------------------------------------

@pytest.mark.parametrize("edit, field", [
    ((("node", "cpuTopology", "detail", 0, "id"), "@@INF@@"), "node.cpuTopology.detail[0]"),
    ((("node", "cpuTopology", "detail", 0, "core"), True), "node.cpuTopology.detail[0]"),
    ((("cgroupVersion",), True), "cgroupVersion"),
    ((("cgroupVersion",), 1.0), "cgroupVersion"),
    ((("resctrl", "minCbmBits"), "@@NAN@@"), "resctrl.minCbmBits"),
    ((("resctrl", "cacheIds"), [HUGE]), "resctrl.cacheIds[0]"),
    ((("node", "usage", "cpu"), "1e16"), "node.usage.cpu"),
])
def test_numbers_are_ints_in_range(tmp_path, edit, field):
    assert_error(tmp_path, text(doc(edit)), f"field {field}")


def test_huge_cgroup_quota_is_not_read(tmp_path):
    """A quota beyond int64 in `cgroups` is 'not read' (None): be_suppress no longer overflows a float."""
    state, o = plan(tmp_path, text(doc((("cgroups", "cpu/kubepods/besteffort/cpu.cfs_quota_us"), str(HUGE)),
                                       (("config", "be_suppress", "cpuSuppressPolicy"), "cfsQuota"))))
    assert check_cli_outcome(o) == "ok" and " raised " not in o.stderr


def test_reserved_cpus_range_is_bounded(tmp_path):
    """reservedCPUs "0-100000000" allocated 100M ints: now a bad cpu list, ignored with a warning."""
    state, o = plan(tmp_path, text(doc(reservation({"reservedCPUs": "0-100000000"}))))
    assert check_cli_outcome(o, max_seconds=5) == "ok"
    assert RESERVATION in o.stderr and "below 8192" in o.stderr


def test_capacity_without_topology_is_bounded(tmp_path):
    assert_error(tmp_path, text(doc(NOTOPO, (("node", "capacity", "cpu"), "10000000"))),
                 "field node.capacity.cpu", "8192")


def test_cpuset_value_in_cgroups_is_checked(tmp_path):
    assert_error(tmp_path, text(doc((("cgroups", "cpuset/kubepods/besteffort/cpuset.cpus"), "0-100000000"))),
                 "field cgroups.cpuset/kubepods/besteffort/cpuset.cpus")


def test_deep_json_state(tmp_path):
    assert_error(tmp_path, b'{"node": {"labels": ' + b"[" * 100000 + b"]" * 100000 + b"}}", "nested")


def test_state_not_utf8(tmp_path):
    assert_error(tmp_path, b"\xff\xfe\x00{", "not UTF-8")


def test_deep_config_profile(tmp_path):
    cfg = tmp_path / "deep.yaml"
    cfg.write_bytes(b"pluginConfig: " + b"[" * 10000 + b"]" * 10000 + b"\n")
    state, o = plan(tmp_path, text(BASE), "--config", str(cfg))
    assert check_cli_outcome(o, names=[str(cfg), "nested"]) == "error"


def test_state_config_errors_name_the_state_file(tmp_path):
    err = assert_error(tmp_path, text(doc((("config", "be_suppress", "cpuSuppressThresholdPercent"), 500))),
                       "field config.be_suppress", "between 0 and 100")
    assert "<default profile>" not in err


def test_state_config_unknown_plugin(tmp_path):
    assert_error(tmp_path, text(doc((("config", "nosuch"), {}))), "field config.nosuch", "unknown plugin")


def test_state_config_of_a_disabled_plugin_is_dropped(tmp_path):
    state = tmp_path / "state.json"
    state.write_bytes(text(doc((("config", "be_suppress", "bogus"), 1))))
    o = run_cli(["agent", "--disable", "be_suppress", "plan", "--state", str(state)], timeout=20)
    assert check_cli_outcome(o) == "ok", o.describe()


@pytest.mark.parametrize("flag, value", [("--interval", "nan"), ("--interval", "inf"), ("--interval", "0"),
                                         ("--node-metric-interval", "nan"), ("--node-metric-interval", "-5")])
def test_agent_time_flags(tmp_path, flag, value):
    from koordfw.testing.cgroups import FakeNode

    node = FakeNode(tmp_path)
    o = run_cli(["agent", "--cgroup-root", str(node.root), "--once", "--dry-run", flag, value], timeout=20)
    assert check_cli_outcome(o, names=[flag]) == "error"


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, 0.0, 1e308, True, "1"])
def test_agent_interval_is_bounded(fake_node, value):
    from koordfw.agent.cgroups import CgroupLayout

    from .agent_testkit import make_registry

    with pytest.raises(ValueError, match="interval"):
        Agent(make_registry(), CgroupLayout(fake_node.root, 1), Executor({"cgroup": fake_node.root}),
              interval=value, proc_root=str(fake_node.proc), sys_root=str(fake_node.sys))
    assert check_interval(0.01) == 0.01 and check_interval(60) == 60.0


@pytest.mark.parametrize("cgdir", ["/", ".", "..", "a/../..", "kube\x00pods", "k/" + "x" * 300])
def test_pod_cgroup_dir_at_the_root_is_refused(tmp_path, cgdir):
    assert_error(tmp_path, text(doc((("pods", 0, "cgroupDir"), cgdir))), "field pods[0].cgroupDir")


@pytest.mark.parametrize("kubepods", ["/", ".", ".."])
def test_kubepods_at_the_root_is_refused(tmp_path, kubepods):
    assert_error(tmp_path, text(doc((("kubepods",), kubepods))), "field kubepods")


def test_duplicates_are_refused(tmp_path):
    assert_error(tmp_path, text(doc((("pods", 1, "uid"), "u-b"))), "field pods[1].uid", "duplicate")
    assert_error(tmp_path, text(doc((("node", "cpuTopology", "detail", 1, "id"), 0))),
                 "field node.cpuTopology.detail[1]", "duplicate")


# -- the bounds as units -----------------------------------------------------------------------------

def test_parse_cpuset_bounds():
    assert parse_cpuset("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpuset(" 3 , 1-2 ,, ") == [1, 2, 3]
    assert parse_cpuset("") == [] and parse_cpuset(None) == []
    assert len(parse_cpuset(f"0-{MAX_CPUS - 1}")) == MAX_CPUS
    # overlapping ranges are merged before expansion: linear in the text, not in ranges × width
    assert parse_cpuset(",".join(["0-4095"] * 50000)) == list(range(4096))
    for bad, part in (("0-100000000", "0-100000000"), ("8192", "8192"), ("3-1", "3-1"), ("-1", "-1"),
                      ("1-", "1-"), ("a", "a"), ("1_0", "1_0"), ("+3", "+3"), ("\u0663", "\u0663"),
                      ("9" * 5000, "characters")):
        with pytest.raises(ValueError, match="invalid cpu list") as e:
            parse_cpuset(bad)
        assert part in str(e.value) and len(str(e.value)) < 300


def test_check_cgroup_dir():
    assert check_cgroup_dir("/kubepods/besteffort/") == "kubepods/besteffort"
    assert check_cgroup_dir("kubepods//x") == "kubepods/x"
    for bad in ("", "/", "//", ".", "a/./b", "..", "a/../b", "a\x00b", "x" * 256, "a/" * 2100, 5, None):
        with pytest.raises(ValueError):
            check_cgroup_dir(bad)


def test_cpu_ids_are_capped():
    ns = NodeState(capacity={"cpu": 10**12})
    assert len(ns.cpu_ids) == MAX_CPUS and len(ns.topology()) == MAX_CPUS


@pytest.mark.parametrize("version, files, quota, period", [
    (1, {"cpu/x/cpu.cfs_quota_us": str(HUGE), "cpu/x/cpu.cfs_period_us": "9" * 5000}, None, 100000),
    (1, {"cpu/x/cpu.cfs_quota_us": "-5", "cpu/x/cpu.cfs_period_us": "\u00b2"}, None, 100000),
    (1, {"cpu/x/cpu.cfs_quota_us": "-1", "cpu/x/cpu.cfs_period_us": "50000"}, -1, 50000),
    (2, {"x/cpu.max": "max 0"}, -1, 100000),
    (2, {"x/cpu.max": f"200000 {HUGE}"}, 200000, 100000),
    (2, {"x/cpu.max": "20000 20000"}, 20000, 20000),
])
def test_quota_and_period_readers_are_bounded(version, files, quota, period):
    ns = NodeState(cgroup_version=version, cgroups=files)
    assert ns.cpu_quota("x") == quota and ns.cpu_period("x") == period


def test_unreadable_cpuset_value_is_not_read():
    assert NodeState(cgroups={"cpuset/x/cpuset.cpus": "0-99999999"}).cpuset("x") is None


def test_resctrl_info_names_the_field():
    with pytest.raises(ManifestError) as e:
        NodeState.from_state_file(doc((("resctrl", "mba", "numClosids"), 1.5)), source="s.json")
    assert "s.json: field resctrl.mba.numClosids" in str(e.value)


# -- the executor and the loop -----------------------------------------------------------------------

@pytest.mark.parametrize("case", exec_cases(), ids=lambda c: c.name)
def test_executor_refuses_bad_paths(case):
    """NUL bytes, over-long names, symlink loops, bad values and the roots' own files are refused (one
    write fails, nothing raises); the QoS-level, v2 kubepods and resctrl writes still go through."""
    assert run_exec_case(case) == case.want


def test_executor_refusal_is_logged_and_counted(tmp_path):
    (tmp_path / "cpu/kubepods").mkdir(parents=True)
    ex = Executor({"cgroup": tmp_path})
    res = ex.apply([FileWrite("cpu/cpu.cfs_quota_us", "1", plugin="t"), FileWrite("cpu/a\x00b/f", "1", plugin="t"),
                    FileWrite("cpu/kubepods/cpu.shares", "2", plugin="t", mkdir=True)])
    assert [r.outcome for r in res] == ["refused", "refused", "written"]
    assert "cgroup v1 hierarchy" in res[0].error and "NUL" in res[1].error
    assert ex.stats.refused == 2 and not (tmp_path / "cpu/cpu.cfs_quota_us").exists()


def test_path_refusal_in_plan_terms():
    assert path_refusal(FileWrite("cpu/kubepods/cpu.shares", "2")) == ""
    assert path_refusal(FileWrite("kubepods/cpu.max", "max"), cgroup_version=2) == ""
    assert path_refusal(FileWrite("kubepods/cpu.max", "max"), cgroup_version=1) != ""
    assert path_refusal(FileWrite("schemata", "L3:0=f", fs="resctrl")) == ""
    assert path_refusal(FileWrite.remove_dir("cpu")) != "" and path_refusal(FileWrite.remove_dir("cpu/x")) == ""


def test_round_survives_a_bad_write_and_bad_proc(tmp_path):
    assert loop_survives_bad_input(tmp_path) == "ok"


async def test_loop_goes_on_after_a_failing_round(fake_node, monkeypatch):
    """A round that raises (a bug, not an OSError) is logged; the loop runs the next one."""
    from koordfw.agent.cgroups import CgroupLayout

    from .agent_testkit import make_registry

    agent = Agent(make_registry(), CgroupLayout(fake_node.root, 1), Executor({"cgroup": fake_node.root}),
                  interval=0.01, proc_root=str(fake_node.proc), sys_root=str(fake_node.sys))
    calls = []
    real = agent.run_once

    async def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("boom")
        return await real()

    monkeypatch.setattr(agent, "run_once", flaky)
    with anyio.move_on_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: agent.run(handle_signals=False))
            while agent.rounds < 2:
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    assert len(calls) >= 3 and agent.rounds >= 2


# -- the property: generated and mutated node states ---------------------------------------------------

HOSTILE = [math.nan, math.inf, -math.inf, 1e300, HUGE, 2**63, -1, 0, True, False, None, 1.5, "", "1e16", "-1",
           "0-100000000", "/", "..", "a/../..", "a\x00b", "x" * 300, "\udc80", "NaN", {}, [], {"a": [1]},
           nested(150), [[[1]]], 8192, "9" * 30, "0-3", "cpu/cpu.cfs_quota_us"]

quantity = st.one_of(st.integers(0, 64).map(str), st.sampled_from(["500m", "1.5", "8Gi", "100Mi", "0", "2k"]))
name = st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=1, max_size=8)


@st.composite
def node_states(draw):
    """A node state from the schema ``from_state_file`` accepts (most draws are valid as they are)."""
    ncpu = draw(st.integers(0, 12))
    topo = [{"id": i, "core": i // 2, "socket": draw(st.integers(0, 1)), "node": 0} for i in range(ncpu)]
    pods = []
    for i in range(draw(st.integers(0, 4))):
        uid = f"u{i}"
        p: dict = {"uid": uid, "usage": {"cpu": draw(quantity)}}
        if draw(st.booleans()):
            qos = draw(st.sampled_from(["BE", "LS", "LSR", "LSE", ""]))
            p["metadata"] = {"name": f"p{i}", "uid": uid, "labels": {"koordinator.sh/qosClass": qos} if qos else {}}
            p["spec"] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": draw(quantity)}}}]}
            if draw(st.booleans()):
                p["metadata"]["annotations"] = {"scheduling.koordinator.sh/resource-status": json.dumps(
                    {"cpuset": draw(st.sampled_from(["0-1", "2", "", "0-3,5"]))})}
        if draw(st.booleans()):
            p["cgroupDir"] = draw(st.sampled_from([f"kubepods/besteffort/pod{uid}", f"kubepods/pod{uid}"]))
        pods.append(p)
    annotations = {}
    if draw(st.booleans()):
        annotations[RESERVATION] = json.dumps({"resources": {"cpu": draw(quantity)},
                                               "reservedCPUs": draw(st.sampled_from(["", "0", "0-1"]))})
    state = {
        "cgroupVersion": draw(st.sampled_from([1, 2])),
        "cgroupDriver": draw(st.sampled_from(["cgroupfs", "systemd"])),
        "node": {"name": draw(name), "capacity": {"cpu": draw(quantity), "memory": "8Gi"},
                 "annotations": annotations, "labels": {"zone": draw(name)},
                 "usage": {"cpu": draw(quantity), "memory": "1Gi"}},
        "pods": pods,
        "hostApps": [{"name": draw(name), "qos": draw(st.sampled_from(["LS", "BE"])),
                      "cgroupPath": draw(st.sampled_from(
                          ["host/a", {"base": "KubepodsBesteffort", "relativePath": "x"}])),
                      "usage": {"cpu": draw(quantity)}}] if draw(st.booleans()) else [],
        "cgroups": {"cpu/kubepods/besteffort/cpu.cfs_quota_us": draw(st.sampled_from(["-1", "50000", "max 100000"])),
                    "cpuset/kubepods/besteffort/cpuset.cpus": draw(st.sampled_from(["0-3", "", "1"]))},
        "config": {"be_suppress": {"enable": draw(st.booleans()),
                                   "cpuSuppressPolicy": draw(st.sampled_from(["cpuset", "cfsQuota"]))}},
    }
    if topo:
        state["node"]["cpuTopology"] = {"detail": topo}
    if draw(st.booleans()):
        state["resctrl"] = {"cbmMask": "7ff", "minCbmBits": 1, "numClosids": 16, "cacheIds": [0, 1], "mba": True}
    return state


def _paths(o, prefix=()):
    yield prefix
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from _paths(v, prefix + (i,))


def _set(o, path, value):
    if not path:
        return value
    t = o
    for k in path[:-1]:
        t = t[k]
    t[path[-1]] = value
    return o


@st.composite
def mutated(draw):
    state = draw(node_states())
    for _ in range(draw(st.integers(0, 3))):
        paths = list(_paths(state))
        path = paths[draw(st.integers(0, len(paths) - 1))]
        how = draw(st.sampled_from(["value", "value", "duplicate", "rename"]))
        if how == "value":
            state = _set(state, path, copy.deepcopy(draw(st.sampled_from(HOSTILE))))
        elif how == "duplicate" and isinstance(state, dict) and isinstance(state.get("pods"), list) \
                and state["pods"]:
            state["pods"].append(copy.deepcopy(state["pods"][0]))
        elif how == "rename" and path and isinstance(path[-1], str):
            parent = state
            for k in path[:-1]:
                parent = parent[k]
            if not isinstance(parent, dict) or path[-1] not in parent:
                continue
            parent[draw(st.sampled_from(["", "\x00", "../x", "x" * 300, "cpu"]))] = parent.pop(path[-1])
    encoding = draw(st.sampled_from(["json", "json", "yaml", "utf-16", "latin-1", "bom", "truncated", "dupkey"]))
    return state, encoding


def encode(state, encoding: str) -> bytes:
    s = json.dumps(state, ensure_ascii=False)  # NaN/Infinity are written as JSON's extension
    if encoding == "yaml":
        return yaml.safe_dump(state, allow_unicode=True).encode("utf-8", "surrogateescape")
    if encoding == "utf-16":
        return s.encode("utf-16", "surrogatepass")
    if encoding == "latin-1":
        return s.encode("latin-1", "replace")
    if encoding == "bom":
        return "\ufeff".encode() + s.encode("utf-8", "surrogatepass")
    if encoding == "truncated":
        b = s.encode("utf-8", "surrogatepass")
        return b[: len(b) * 2 // 3]
    if encoding == "dupkey":
        return s.replace('"cgroupVersion"', '"cgroupVersion": 2, "cgroupVersion"', 1).encode("utf-8", "surrogatepass")
    return s.encode("utf-8", "surrogatepass")


@settings(derandomize=True, max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(mutated())
def test_generated_states_never_crash(tmp_path, example):
    state, encoding = example
    path = tmp_path / "state.json"
    path.write_bytes(encode(state, encoding))
    o = run_cli(["agent", "plan", "--state", str(path)], timeout=20)
    check_cli_outcome(o, names=[str(path)], max_seconds=10)
    assert " raised " not in o.stderr, o.describe()  # no plugin crashed on what the parser let through
