"""Hostile node state files (and agent flags) for ``koordfw agent plan --state F``, one minimal input per
problem, grouped by the class of issue 16 they belong to. Used by ``test_hostile_state.py`` and by
the before/after measurement (``python -m tests.agent.hostile_cases``).

Each case is ``Case(cls, name, content, names, argv)``: ``content`` is the state file's bytes,
``names`` what the one error line must name besides the file (``None``: any clean outcome, exit 0
included, is fine), ``argv`` extra arguments (``{state}``, ``{config}`` and ``{root}`` substituted).
"""

from __future__ import annotations

import copy
import json
from typing import Any, NamedTuple

RESERVATION = "node.koordinator.sh/reservation"

BASE: dict[str, Any] = {
    "cgroupVersion": 1,
    "node": {"name": "n1", "capacity": {"cpu": "4", "memory": "8Gi"},
             "cpuTopology": {"detail": [{"id": i, "core": i, "socket": 0, "node": 0} for i in range(4)]},
             "usage": {"cpu": "2", "memory": "1Gi"}},
    "pods": [{"metadata": {"name": "batch", "uid": "u-b", "labels": {"koordinator.sh/qosClass": "BE"}},
              "spec": {"containers": [{"name": "c"}]}, "uid": "u-b", "usage": {"cpu": "1"}},
             {"uid": "u-ls", "usage": {"cpu": "1"}}],
    "hostApps": [{"name": "agent", "qos": "LS", "cgroupPath": "host/agent", "usage": {"cpu": "0.1"}}],
    "cgroups": {"cpu/kubepods/besteffort/cpu.cfs_quota_us": "-1",
                "cpuset/kubepods/besteffort/cpuset.cpus": "0-3"},
    "resctrl": {"cbmMask": "7ff", "minCbmBits": 1, "numClosids": 16, "cacheIds": [0], "vendor": "GenuineIntel"},
    "config": {"be_suppress": {"enable": True}},
}

#: placeholders replaced by YAML-only values after ``json.dumps`` (JSON has no NaN/Infinity)
YAML_VALUES = {"@@NAN@@": ".nan", "@@INF@@": ".inf", "@@NINF@@": "-.inf"}


class Case(NamedTuple):
    cls: str
    name: str
    content: bytes
    names: tuple[str, ...] | None
    argv: tuple[str, ...] = ()


def doc(*edits: tuple[tuple[Any, ...], Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """BASE with ``(path, value)`` edits; a value ``DELETE`` removes the key."""
    d = copy.deepcopy(BASE if base is None else base)
    for path, value in edits:
        o = d
        for k in path[:-1]:
            if isinstance(o, dict) and k not in o:
                o[k] = {}
            o = o[k]
        if value is DELETE:
            del o[path[-1]]
        else:
            o[path[-1]] = value
    return d


DELETE = object()


def text(d: Any) -> bytes:
    s = json.dumps(d, ensure_ascii=False)
    for k, v in YAML_VALUES.items():
        s = s.replace(json.dumps(k), v)
    return s.encode()


def reservation(obj: Any) -> tuple[tuple[Any, ...], Any]:
    return (("node", "annotations", RESERVATION), obj if isinstance(obj, str) else json.dumps(obj))


def nested(depth: int, leaf: Any = 1) -> Any:
    o = leaf
    for _ in range(depth):
        o = [o]
    return o


HUGE = 10**400
NOTOPO = (("node", "cpuTopology"), DELETE)


def cases() -> list[Case]:
    out: list[Case] = []

    def add(cls: str, name: str, d: Any, names: tuple[str, ...] | None, *argv: str) -> None:
        out.append(Case(cls, name, d if isinstance(d, bytes) else text(d), names, tuple(argv)))

    # -- 1. numbers: non-finite, out of range, floats and bools where integers go --------------------
    n = "numbers"
    for v, label in ((True, "true"), (1.0, "1.0"), (2.5, "2.5"), ("1", "'1'"), ("@@NAN@@", ".nan"), (HUGE, "10**400")):
        add(n, f"cgroupVersion={label}", doc((("cgroupVersion",), v)), ("cgroupVersion",))
    topo = ("node", "cpuTopology", "detail", 0)
    for key in ("id", "core", "socket", "node"):
        for v, label in (("@@INF@@", ".inf"), ("@@NAN@@", ".nan"), (1e300, "1e300"), (True, "true"), (1.5, "1.5"),
                         (-1, "-1"), (HUGE, "10**400"), ("3", "'3'")):
            add(n, f"cpuTopology.{key}={label}", doc((topo + (key,), v)), ("node.cpuTopology.detail[0]",))
    # JSON's 1e400 is read as a float infinity (no NaN/Infinity literal needed)
    add(n, "cpuTopology.id=1e400 (JSON)", text(doc((topo + ("id",), 1e300))).replace(b"1e+300", b"1e400"),
        ("node.cpuTopology.detail[0]",))
    add(n, "cpuTopology.id=8192", doc((topo + ("id",), 8192)), ("node.cpuTopology.detail[0]",))
    add(n, "cpuTopology.core=2**40", doc((topo + ("core",), 2**40)), ("node.cpuTopology.detail[0]",))
    for key, vals in (("minCbmBits", (("@@INF@@", ".inf"), ("@@NAN@@", ".nan"), (True, "true"), (HUGE, "10**400"),
                                      (-1, "-1"), (1.5, "1.5"))),
                      ("numClosids", ((1e300, "1e300"), (-5, "-5"), (HUGE, "10**400"), (False, "false"))),
                      ("cacheIds", ((["@@INF@@"], "[.inf]"), ("123", "'123'"), ([True], "[true]"),
                                    ([HUGE], "[10**400]"), ([-1], "[-1]"), ([0, 0], "[0,0]"), (7, "7"))),
                      ("mba", (([["a", "b"]], "[['a','b']]"), (5, "5"), ("x", "'x'"),
                               ({"bandwidthGran": "@@NAN@@"}, "{gran: .nan}"),
                               ({"minBandwidth": HUGE}, "{min: 10**400}"))),
                      ("cbmMask", ((HUGE, "10**400"), ("zz", "'zz'"), ("f" * 400, "'f'*400")))):
        for v, label in vals:
            add(n, f"resctrl.{key}={label}", doc((("resctrl", key), v)), ("resctrl",))
    for where, path in (("node.usage", ("node", "usage", "cpu")), ("pods[0].usage", ("pods", 0, "usage", "cpu")),
                        ("hostApps[0].usage", ("hostApps", 0, "usage", "cpu")),
                        ("node.capacity", ("node", "capacity", "cpu"))):
        for v, label in (("@@NAN@@", ".nan"), ("@@INF@@", ".inf"), ("1e16", "'1e16'"), (HUGE, "10**400"),
                         (-1, "-1"), (True, "true")):
            add(n, f"{where}.cpu={label}", doc((path, v)), (where,))
    add(n, "cgroups value=10**400 quota", doc((("cgroups", "cpu/kubepods/besteffort/cpu.cfs_quota_us"), str(HUGE)),
                                             (("config", "be_suppress", "cpuSuppressPolicy"), "cfsQuota")), None)
    add(n, "cgroups value=.nan", doc((("cgroups", "cpu/kubepods/besteffort/cpu.cfs_quota_us"), "@@NAN@@")),
        ("cgroups",))
    add(n, "cgroups value={}", doc((("cgroups", "cpu/kubepods/besteffort/cpu.cfs_quota_us"), {"a": 1})),
        ("cgroups",))
    add(n, "cgroups v2 cpu.max period 0",
        doc((("cgroupVersion",), 2), (("cgroups",), {"kubepods/besteffort/cpu.max": "max 0"}),
            (("config", "be_suppress", "cpuSuppressPolicy"), "cfsQuota")), None)
    add(n, "cgroups v2 cpu.max period 10**400",
        doc((("cgroupVersion",), 2), (("cgroups",), {"kubepods/besteffort/cpu.max": f"max {HUGE}"}),
            (("config", "be_suppress", "cpuSuppressPolicy"), "cfsQuota")), None)
    add(n, "cgroups v1 cfs_period_us 5000 digits",
        doc((("cgroups", "cpu/kubepods/besteffort/cpu.cfs_period_us"), "9" * 5000),
            (("config", "be_suppress", "cpuSuppressPolicy"), "cfsQuota")), None)
    add(n, "cgroups v1 cfs_period_us unicode digit",
        doc((("cgroups", "cpu/kubepods/besteffort/cpu.cfs_period_us"), "\u00b2"),
            (("config", "be_suppress", "cpuSuppressPolicy"), "cfsQuota")), None)
    # a bad reservation annotation is logged and ignored by the plugins that read it, as in Koordinator
    add(n, "reservation resources cpu=1e16", doc(reservation({"resources": {"cpu": "1e16"}})), None)
    add(n, "JSON integer of 5000 digits", text(BASE).replace(b'"minCbmBits": 1', b'"minCbmBits": ' + b"9" * 5000),
        ())
    add(n, "YAML integer of 5000 digits", b"cgroupVersion: " + b"1" * 5000 + b"\n", ())

    # -- 2. unbounded work from tiny inputs ---------------------------------------------------------
    u = "unbounded"
    add(u, "reservedCPUs=0-100000000", doc(reservation({"reservedCPUs": "0-100000000"})), None)
    add(u, "reservedCPUs=0-4095 x 50000", doc(reservation({"reservedCPUs": ",".join(["0-4095"] * 50000)})),
        None)
    add(u, "reservedCPUs=10**400", doc(reservation({"reservedCPUs": str(HUGE)})), None)
    status = "scheduling.koordinator.sh/resource-status"
    add(u, "pod resource-status cpuset=0-100000000",
        doc((("pods", 0, "metadata", "annotations"), {status: json.dumps({"cpuset": "0-100000000"})})), None)
    system_qos = "node.koordinator.sh/system-qos-resource"
    add(u, "node system-qos cpuset=0-100000000",
        doc((("node", "annotations", system_qos), json.dumps({"cpuset": "0-100000000"}))), None)
    add(u, "state file of 9 MiB", b'{"node": {"name": "' + b"x" * (9 * 2**20) + b'"}}', ())
    add(u, "state file of 7 MiB of YAML flow", b"[" + b"1," * (7 * 2**19) + b"oops", ())
    add(u, "capacity cpu=10000000 no topology", doc(NOTOPO, (("node", "capacity", "cpu"), "10000000")),
        ("node.capacity",))
    add(u, "capacity cpu=1e8 no topology", doc(NOTOPO, (("node", "capacity", "cpu"), "100000000")),
        ("node.capacity",))
    add(u, "capacity cpu=9e18m no topology", doc(NOTOPO, (("node", "capacity", "cpu"), "9000000000000000000m")),
        ("node.capacity",))
    add(u, "cgroups cpuset.cpus=0-100000000",
        doc((("cgroups", "cpuset/kubepods/besteffort/cpuset.cpus"), "0-100000000")), ("cgroups",))
    add(u, "cgroups cpuset.cpus=0-99999999999999",
        doc((("cgroups", "cpuset/kubepods/besteffort/cpuset.cpus"), "0-99999999999999")), ("cgroups",))
    add(u, "cpuTopology 200000 cpus", doc((("node", "cpuTopology", "detail"),
                                          [{"id": i, "core": i} for i in range(200000)])),
        ("node.cpuTopology.detail[8192]",))
    add(u, "cpuTopology id=100000000", doc((topo + ("id",), 100000000)), ("node.cpuTopology.detail[0]",))
    add(u, "cgroups value 1 MiB", doc((("cgroups", "cpuset/kubepods/besteffort/cpuset.cpus"), "0," * 500000)),
        ("cgroups",))

    # -- 3. nesting and encodings -------------------------------------------------------------------
    e = "nesting/encoding"
    add(e, "JSON nested 100000 deep", b'{"node": {"labels": ' + b"[" * 100000 + b"]" * 100000 + b"}}", ())
    add(e, "JSON nested 150 deep", doc((("node", "labels", "x"), nested(150))), ())
    add(e, "YAML nested 10000 deep", b"node:\n  labels: " + b"[" * 10000 + b"]" * 10000 + b"\n", ())
    add(e, "YAML block nested 2000 deep", b"".join(b"  " * i + b"a:\n" for i in range(2000)) + b"  " * 2000 + b"1\n",
        ())
    add(e, "not UTF-8 (latin-1)", text(doc((("node", "name"), "n\u00e9"))).decode().encode("latin-1"), ())
    add(e, "UTF-16 with BOM", text(BASE).decode().encode("utf-16"), ())
    add(e, "invalid byte 0xff", b"\xff\xfe\x00{", ())
    add(e, "YAML alias bomb", b"a: &a [x,x,x,x,x,x,x,x,x,x]\n" + b"".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 10)}]\n".encode() for i in range(8)), ())
    add(e, "YAML python tag", b"node: !!python/object/apply:os.system ['true']\n", ())
    add(e, "reservation JSON nested 100000 deep", doc(reservation("[" * 100000 + "]" * 100000)), None)
    add(e, "reservation JSON NaN", doc(reservation('{"resources": {"cpu": NaN}}')), None)
    add(e, "reservation not JSON", doc(reservation("{oops")), None)
    add(e, "reservation reservedCPUs=5 (int)", doc(reservation({"reservedCPUs": 5})), None)
    add(e, "pod resource-status JSON nested 100000 deep",
        doc((("pods", 0, "metadata", "annotations"), {status: "[" * 100000 + "]" * 100000})), None)
    add(e, "state is a list", b"[1, 2]", ())
    add(e, "state is empty", b"", None)
    add(e, "labels value nested dict", doc((("node", "labels", "x"), {"a": 1})), ("node.labels",))
    add(e, "node.name is a list", doc((("node", "name"), [1])), ("node.name",))
    add(e, "duplicate pod uid", doc((("pods", 1, "uid"), "u-b")), ("pods[1]",))
    add(e, "duplicate cpu id", doc((("node", "cpuTopology", "detail", 1, "id"), 0)), ("node.cpuTopology.detail[1]",))
    add(e, "--config nested 10000 deep", text(BASE), (), "--config", "{config}")
    add(e, "--config not UTF-8", text(BASE), (), "--config", "{config_latin1}")
    add(e, "--config alias bomb", text(BASE), (), "--config", "{config_bomb}")
    add(e, "--config of 2 MiB flow YAML", text(BASE), (), "--config", "{config_big}")

    # -- 4. config errors blamed on the state file --------------------------------------------------
    c = "config blame"
    add(c, "config.be_suppress bad field value",
        doc((("config", "be_suppress", "cpuSuppressThresholdPercent"), "lots")), ("config.be_suppress",))
    add(c, "config.be_suppress out of range", doc((("config", "be_suppress", "cpuSuppressThresholdPercent"), 500)),
        ("config.be_suppress",))
    add(c, "config.be_suppress unknown key", doc((("config", "be_suppress", "nope"), 1)), ("config.be_suppress",))
    add(c, "config.be_suppress not a mapping", doc((("config", "be_suppress"), 5)), ("config.be_suppress",))
    add(c, "config unknown plugin", doc((("config", "nosuch"), {})), ("config.nosuch",))
    add(c, "config is a list", doc((("config",), [1])), ("config",))

    # -- 5. time values -----------------------------------------------------------------------------
    t = "time values"
    for v in ("nan", "inf", "-1", "0", "1e308"):
        add(t, f"agent --interval {v}", b"", ("--interval",), "--interval", v)
    for v in ("nan", "inf", "-5"):
        add(t, f"agent --node-metric-interval {v}", b"", ("--node-metric-interval",), "--node-metric-interval", v)

    # -- 6. paths that reach the executor ------------------------------------------------------------
    p = "paths"
    for v, label in (("/", "/"), (".", "."), ("..", ".."), ("a/../..", "a/../.."),
                     ("/kubepods/../../..", "/k/../../.."), ("kube\x00pods", "NUL"), ("k/" + "x" * 300, "component 300")):
        add(p, f"pods[0].cgroupDir={label}", doc((("pods", 0, "cgroupDir"), v)), ("pods[0].cgroupDir",))
    for v, label in (("/", "/"), (".", "."), ("..", ".."), ("a\x00b", "NUL"), ("x" * 300, "component 300")):
        add(p, f"kubepods={label}", doc((("kubepods",), v)), ("kubepods",))
    for v, label in (("../..", "../.."), ("a\x00b", "NUL")):
        add(p, f"hostApps[0].cgroupPath={label}", doc((("hostApps", 0, "cgroupPath"), v)), ("hostApps[0].cgroupPath",))
    add(p, "cgroups key with NUL", doc((("cgroups", "cpu/a\x00b"), "1")), ("cgroups",))
    add(p, "pods[1].uid=../../x", doc((("pods", 1, "uid"), "../../x")), ("pods[1].uid",))
    add(p, "kubepods=5", doc((("kubepods",), 5)), ("kubepods",))
    return out


#: the agent (not plan) cases run `koordfw agent ...` against a fake cgroup tree
AGENT_CASES = ("--interval", "--node-metric-interval")


def argv_of(case: Case, state: str, paths: dict[str, str]) -> list[str]:
    extra = [a.format(state=state, **paths) for a in case.argv]
    if case.argv and case.argv[0] in AGENT_CASES:
        return ["agent", "--cgroup-root", paths["root"], "--once", "--dry-run", *extra]
    return ["agent", "plan", "--state", state, *extra]


def write_inputs(tmp: Any) -> dict[str, str]:
    """The side files some cases name (profiles, a fake cgroup root) under ``tmp``; returns their paths."""
    from pathlib import Path

    tmp = Path(tmp)
    cfg = tmp / "deep.yaml"
    cfg.write_bytes(b"pluginConfig: " + b"[" * 10000 + b"]" * 10000 + b"\n")
    latin = tmp / "latin1.yaml"
    latin.write_bytes("schedulerName: caf\u00e9\n".encode("latin-1"))
    bomb = tmp / "bomb.yaml"
    bomb.write_bytes(b"pluginConfig:\n  a: &a [x,x,x,x,x,x,x,x,x,x]\n" + b"".join(
        f"  {chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 10)}]\n".encode() for i in range(8)))
    big = tmp / "big.yaml"
    big.write_bytes(b"pluginConfig: {x: [" + b"1," * 2**20 + b"1]}\n")
    root = tmp / "cgroot"
    if not root.exists():
        from koordfw.testing.cgroups import FakeNode

        fake = FakeNode(tmp / "fakenode")
        root = fake.root
    return {"config": str(cfg), "config_latin1": str(latin), "config_bomb": str(bomb), "config_big": str(big),
            "root": str(root)}


KINDS = ["error", "ok", "accepted", "wrong blame", "multi-line", "plugin crash", "traceback", "hang", "blow-up"]


def classify(outcome: Any, names: tuple[str, ...] | None, file: str) -> str:
    """One of :data:`KINDS`: ``error`` (exit 2, one line naming file and field), ``ok`` (exit 0 where
    that is fine), ``accepted`` (exit 0 where an error is due), ``wrong blame`` (the error does not name
    the file or field), ``multi-line`` (the error spans lines), ``plugin crash`` (a plugin raised on the
    input: logged with its traceback, exit 0), ``traceback``, ``hang`` (killed after the timeout),
    ``blow-up`` (MemoryError or killed)."""
    if outcome.timed_out:
        return "hang"
    if outcome.out_of_memory or outcome.rc is None or outcome.rc == 3:
        return "blow-up"
    if outcome.rc not in (0, 2) or (outcome.rc == 2 and "Traceback" in outcome.stderr):
        return "traceback"
    if " raised " in outcome.stderr and "koordfw: warning: plugin" in outcome.stderr:
        return "plugin crash"
    if outcome.rc == 0:
        return "ok" if names is None else "accepted"
    lines = outcome.stderr.splitlines()
    errors = [i for i, ln in enumerate(lines) if ln.startswith("koordfw: error:")]
    want = list(names or ()) + ([file] if file else [])
    if len(errors) != 1 or any(w not in lines[errors[0]] for w in want):
        return "wrong blame"
    if errors[0] != len(lines) - 1:
        return "multi-line"
    return "error"


# -- the executor and the loop ----------------------------------------------------------------------

class ExecCase(NamedTuple):
    name: str
    fs: str
    path: Any
    value: str = "1"
    op: str = "write"  # write | rmdir | mkdir
    version: int = 1
    want: str = "refused"


def exec_cases() -> list[ExecCase]:
    kp = "cpu/kubepods"
    return [
        ExecCase("NUL byte in the path", "cgroup", f"{kp}/a\x00b/cpu.shares"),
        ExecCase("component of 300 bytes", "cgroup", f"{kp}/{'x' * 300}/cpu.shares"),
        ExecCase("path of 5000 bytes", "cgroup", "cpu/" + "a/" * 2500 + "f"),
        ExecCase("path is None", "cgroup", None),
        ExecCase("a controller root's file", "cgroup", "cpu/cpu.cfs_quota_us"),
        ExecCase("the cgroup root's file", "cgroup", "release_agent"),
        ExecCase("./cpu/cpu.cfs_quota_us", "cgroup", "./cpu/cpu.cfs_quota_us"),
        ExecCase("cpu/./cpu.cfs_quota_us", "cgroup", "cpu/./cpu.cfs_quota_us"),
        ExecCase("cpu//cpu.cfs_quota_us", "cgroup", "cpu//cpu.cfs_quota_us"),
        ExecCase("symlink to the controller root", "cgroup", f"{kp}/up/cpu.cfs_quota_us"),
        ExecCase("symlink loop", "cgroup", f"{kp}/loop/cpu.shares"),
        ExecCase("value with a NUL byte", "cgroup", f"{kp}/besteffort/cpu.cfs_quota_us", "1\x002"),
        ExecCase("value with a lone surrogate", "cgroup", f"{kp}/besteffort/cpu.cfs_quota_us", "\udc80"),
        ExecCase("v2: the root's cgroup.subtree_control", "cgroup", "cgroup.subtree_control", "+cpu", version=2),
        ExecCase("mkdir: component of 300 bytes", "resctrl", f"{'x' * 300}/schemata", op="mkdir"),
        ExecCase("mkdir through a file", "cgroup", f"{kp}/besteffort/cpu.cfs_quota_us/x/f", op="mkdir", want="error"),
        ExecCase("rmdir a controller root", "cgroup", "cpu", op="rmdir"),
        ExecCase("rmdir with a NUL byte", "cgroup", f"{kp}/a\x00b", op="rmdir"),
        ExecCase("rmdir through a symlink loop", "cgroup", f"{kp}/loop/x", op="rmdir"),
        ExecCase("rmdir a component of 300 bytes", "cgroup", f"{kp}/{'x' * 300}", op="rmdir"),
        # what must still work
        ExecCase("ok: v1 QoS level quota", "cgroup", f"{kp}/besteffort/cpu.cfs_quota_us", "5000", want="written"),
        ExecCase("ok: v2 kubepods/cpu.max", "cgroup", "kubepods/cpu.max", "50000 100000", version=2, want="written"),
        ExecCase("ok: resctrl root schemata", "resctrl", "schemata", "L3:0=3ff", want="written"),
        ExecCase("ok: resctrl group schemata", "resctrl", "BE/schemata", "L3:0=f", op="mkdir", want="written"),
    ]


def exec_tree(tmp: Any, version: int) -> dict[str, Any]:
    """A cgroup root (v1 or v2) and a resctrl root with the files and symlinks :func:`exec_cases` name."""
    import os
    from pathlib import Path

    tmp = Path(tmp)
    cg = tmp / f"cg{version}"
    rs = tmp / "resctrl"
    if version == 1:
        (cg / "cpu/kubepods/besteffort").mkdir(parents=True)
        (cg / "cpu/cpu.cfs_quota_us").write_text("-1\n")
        (cg / "cpu/kubepods/besteffort/cpu.cfs_quota_us").write_text("-1\n")
        (cg / "release_agent").write_text("\n")
        os.symlink("..", cg / "cpu/kubepods/up")
        os.symlink("loop", cg / "cpu/kubepods/loop")
    else:
        (cg / "kubepods").mkdir(parents=True)
        (cg / "cgroup.controllers").write_text("cpu cpuset\n")
        (cg / "cgroup.subtree_control").write_text("\n")
        (cg / "kubepods/cpu.max").write_text("max 100000\n")
    rs.mkdir(exist_ok=True)
    (rs / "schemata").write_text("L3:0=7ff\n")
    return {"cgroup": cg, "resctrl": rs}


def run_exec_case(case: ExecCase) -> str:
    """The outcome of one executor case in this process: the result's outcome, or ``raised X``."""
    import tempfile

    from koordfw.agent.executor import Executor
    from koordfw.core.nodestate import FileWrite

    with tempfile.TemporaryDirectory() as tmp:
        roots = exec_tree(tmp, case.version)
        w = (FileWrite.remove_dir(case.path, fs=case.fs, plugin="t") if case.op == "rmdir"
             else FileWrite(case.path, case.value, fs=case.fs, plugin="t", mkdir=case.op == "mkdir"))
        try:
            [r] = Executor(roots).apply([w])
        except Exception as e:  # noqa: BLE001 - what the measurement counts
            return f"raised {type(e).__name__}"
        return r.outcome


def loop_survives_bad_input(tmp: Any) -> str:
    """One agent round on a fake node where a plugin plans a write with a NUL byte and ``/proc/stat`` is
    garbage: ``ok`` when the round completes with the bad write refused, else what went wrong."""
    import anyio

    from koordfw import hookimpl
    from koordfw.agent.cgroups import CgroupLayout
    from koordfw.agent.executor import Executor
    from koordfw.agent.loop import Agent
    from koordfw.core.nodestate import FileWrite
    from koordfw.core.plugins import Registry
    from koordfw.core.profile import profile_from_dict
    from koordfw.testing.cgroups import FakeNode

    class Evil:
        @hookimpl
        def qos_plan(self, node_state):
            be = node_state.qos_dir("besteffort")
            return [FileWrite(f"cpu/{be}/a\x00b/cpu.shares", "2"), FileWrite(f"cpu/{be}/cpu.shares", "2")]

    node = FakeNode(__import__("pathlib").Path(tmp) / "loopnode")
    (node.proc / "stat").write_text("cpu a b c d\n")
    reg = Registry(profile_from_dict({})).load(only=set(), extra={"evil": Evil})
    agent = Agent(reg, CgroupLayout(node.root, 1), Executor({"cgroup": node.root}), node_name="n1",
                  proc_root=str(node.proc), sys_root=str(node.sys))
    try:
        results = anyio.run(agent.run_once)
    except Exception as e:  # noqa: BLE001
        return f"round raised {type(e).__name__}"
    got = [r.outcome for r in results if r.write.plugin == "evil"]
    return "ok" if got == ["refused", "written"] else f"outcomes {got}"


def main() -> None:  # the before/after measurement
    import collections
    import sys
    import tempfile
    from pathlib import Path

    from koordfw.core.plugins import Registry
    from koordfw.testing.hostile import run_cli

    Registry().load()  # import every plugin in the parent, so each forked run is fast
    verbose = "-v" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_inputs(tmp)
        table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for case in cases():
            state = Path(tmp) / "state.yaml"
            state.write_bytes(case.content)
            argv = argv_of(case, str(state), paths)
            o = run_cli(argv, timeout=10)
            blame = "" if case.argv and case.argv[0] in AGENT_CASES else (
                paths[case.argv[1][1:-1]] if case.argv and case.argv[0] == "--config" else str(state))
            got = classify(o, case.names, blame)
            table[case.cls][got] += 1
            if verbose:
                last = (o.stderr.strip().splitlines() or [""])[-1][:160]
                print(f"{case.cls:18} {case.name:45} {got:12} {o.seconds:5.2f}s {last}")
        from koordfw.testing.hostile import run_isolated

        execs = collections.Counter()
        for ec in exec_cases():
            o = run_isolated(lambda ec=ec: print(run_exec_case(ec)), timeout=10)
            got = o.stdout.strip().splitlines()[-1] if o.rc == 0 else ("hang" if o.timed_out else f"exit {o.rc}")
            good = got == ec.want
            execs["as wanted" if good else ("raised" if got.startswith("raised") else "wrong outcome")] += 1
            if verbose:
                print(f"{'executor':18} {ec.name:45} {got:12} (want {ec.want})")
        o = run_isolated(lambda: print(loop_survives_bad_input(tmp)), timeout=20)
        loop = o.stdout.strip().splitlines()[-1] if o.rc == 0 else f"exit {o.rc}"
        print()
        print(f"{'class':18} {'inputs':>6} " + " ".join(f"{k:>12}" for k in KINDS))
        for cls, cnt in table.items():
            print(f"{cls:18} {sum(cnt.values()):>6} " + " ".join(f"{cnt[k]:>12}" for k in KINDS))
        print(f"executor cases: {sum(execs.values())}: {dict(execs)}; agent round with bad input: {loop}")


if __name__ == "__main__":
    main()
