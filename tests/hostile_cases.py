"""Minimal hostile inputs for ``koordfw simulate``/``deschedule`` and profiles, one per class of issue #16.

Each case is the smallest input that once ended in a traceback, a hang, a blow-up or silence, with the
outcome it must have now: ``ok`` (exit 0; ``bound`` lists pods that must be placed) or ``error`` (exit 2,
one line naming each of ``names``). Used by ``tests/test_hostile_inputs.py`` and, to count outcomes
before and after a change, by ``bench/hostile_corpus.py``.
"""

from __future__ import annotations

import attrs

NODE = "kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: '4', memory: 8Gi}}\n"
NODE2 = "kind: Node\nmetadata: {name: m}\nstatus: {allocatable: {cpu: '4', memory: 8Gi}}\n"


def pod(name: str = "p", requests: str = "{cpu: '1'}", extra_spec: str = "", meta: str = "") -> str:
    return (f"kind: Pod\nmetadata: {{name: {name}{', ' + meta if meta else ''}}}\n"
            f"spec: {{{extra_spec}containers: [{{name: c, resources: {{requests: {requests}}}}}]}}\n")


BOMB = ('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
        + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")))


@attrs.frozen
class Case:
    name: str
    cls: str
    #: file name → content; the command runs in a directory holding them
    files: dict[str, str | bytes]
    #: argv after ``koordfw``, with ``{dir}`` for that directory
    argv: tuple[str, ...] = ("simulate", "{dir}/cluster.yaml", "-o", "json")
    expect: str = "error"
    names: tuple[str, ...] = ()
    bound: tuple[str, ...] = ()


def _c(name, cls, cluster, *, expect="error", names=(), bound=(), profile=None, argv=None):
    files: dict[str, str | bytes] = {"cluster.yaml": cluster}
    args = ("simulate", "{dir}/cluster.yaml", "-o", "json")
    if profile is not None:
        files["profile.yaml"] = profile
        args += ("--profile", "{dir}/profile.yaml")
    return Case(name, cls, files, tuple(argv) if argv else args, expect, tuple(names), tuple(bound))


CASES: list[Case] = [
    # -- 0: a crash on valid input --------------------------------------------------------------------
    _c("bound pod requests an unadvertised resource", "valid",
       NODE + "---\n" + pod(requests="{example.com/foo: '1'}", extra_spec="nodeName: n, ") + "---\n" + pod("q"),
       expect="ok", bound=("default/p", "default/q")),
    _c("pending pod requests an unadvertised resource", "valid",
       NODE + "---\n" + pod(requests="{example.com/foo: '1'}"), expect="ok"),
    _c("deschedule with an unadvertised resource", "valid",
       NODE + "---\n" + pod(requests="{example.com/foo: '1'}", extra_spec="nodeName: n, "), expect="ok",
       argv=("deschedule", "{dir}/cluster.yaml")),
    # -- 1: non-finite and out-of-range numbers -----------------------------------------------------------
    _c("cpu .nan", "numbers", NODE + "---\n" + pod(requests="{cpu: .nan}"),
       names=("cluster.yaml", "Pod default/p", "spec.containers[0].resources.requests.cpu")),
    _c("cpu .inf", "numbers", NODE + "---\n" + pod(requests="{cpu: .inf}"), names=("requests.cpu", "finite")),
    Case("JSON Infinity", "numbers", {"cluster.json": '{"kind": "Node", "metadata": {"name": "n"}, '
                                                      '"status": {"allocatable": {"cpu": Infinity}}}'},
         ("simulate", "{dir}/cluster.json"), names=("cluster.json", "Infinity")),
    _c("1e16 cores allocatable", "numbers",
       "kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: '1e16'}}\n",
       names=("Node n", "status.allocatable.cpu", "2^63-1")),
    _c("10E memory on a bound pod", "numbers",
       NODE + "---\n" + pod(requests="{memory: 10E}", extra_spec="nodeName: n, "), names=("requests.memory",)),
    _c("10E memory on a pending pod", "numbers", NODE + "---\n" + pod(requests="{memory: 10E}"),
       names=("requests.memory",)),
    _c("400-digit integer quantity", "numbers", NODE + "---\n" + pod(requests="{cpu: " + "9" * 400 + "}"),
       names=("requests.cpu",)),
    _c("negative request", "numbers", NODE + "---\n" + pod(requests="{cpu: '-1'}"),
       names=("requests.cpu", "greater than or equal to 0")),
    _c("negative capacity", "numbers", "kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {memory: -1Gi}}\n",
       names=("status.allocatable.memory",)),
    _c("exabyte node fits and scores", "numbers",
       "kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: '4', memory: 8E}}\n---\n" + pod(),
       expect="ok", bound=("default/p",)),
    _c("huge priority", "numbers", NODE + "---\n" + pod(extra_spec="priority: " + "9" * 400 + ", "),
       names=("spec.priority",)),
    # -- 2: tiny inputs that cause unbounded work -------------------------------------------------------
    _c("exponent 1e100000000", "unbounded", NODE + "---\n" + pod(requests="{cpu: '1e100000000'}"),
       names=("requests.cpu", "exponent")),
    _c("YAML alias bomb", "unbounded", BOMB, names=("cluster.yaml", "aliases")),
    _c("long digit string", "unbounded", NODE + "---\n" + pod(requests="{cpu: '" + "1" * 100000 + "'}"),
       names=("requests.cpu",)),
    # -- 3: recursion and encoding ----------------------------------------------------------------------
    _c("deep YAML", "recursion", "[" * 600 + "]" * 600, names=("cluster.yaml", "nested")),
    Case("deep JSON", "recursion", {"cluster.json": "[" * 100000 + "]" * 100000}, ("simulate", "{dir}/cluster.json"),
         names=("cluster.json", "nested")),
    _c("deep label value", "recursion",
       "kind: Node\nmetadata: {name: n, labels: {a: " + "[" * 300 + "]" * 300 + "}}\n", names=("cluster.yaml",)),
    Case("manifest not UTF-8", "encoding", {"cluster.yaml": b"kind: Node\nmetadata: {name: \xff}\n"},
         names=("cluster.yaml", "UTF-8")),
    _c("profile not UTF-8", "encoding", NODE, profile=b"disable: [\xfe]\n", names=("profile.yaml", "UTF-8")),
    _c("deep profile", "recursion", NODE, profile="pluginConfig: " + "[" * 600 + "]" * 600,
       names=("profile.yaml", "nested")),
    # -- 4: time values that stop the clock ---------------------------------------------------------------
    _c("creationTimestamp 1e19", "time", NODE + "---\n" + pod(meta="creationTimestamp: 1.0e+19"),
       names=("metadata.creationTimestamp",)),
    _c("creationTimestamp .inf", "time", NODE + "---\n" + pod(meta="creationTimestamp: .inf"),
       names=("metadata.creationTimestamp",)),
    _c("400-digit timestamp", "time", NODE + "---\n" + pod(meta="creationTimestamp: " + "9" * 400),
       names=("metadata.creationTimestamp",)),
    _c("podInitialBackoffSeconds .nan", "time", NODE, profile="podInitialBackoffSeconds: .nan\n",
       names=("profile.yaml", "podInitialBackoffSeconds")),
    _c("pluginTimeoutSeconds 0", "time", NODE, profile="pluginTimeoutSeconds: 0\n",
       names=("profile.yaml", "pluginTimeoutSeconds")),
    _c("podMaxBackoffSeconds .inf", "time", NODE, profile="podMaxBackoffSeconds: .inf\n",
       names=("podMaxBackoffSeconds",)),
    # -- 5: one bad object takes down more than itself -------------------------------------------------
    _c("malformed node affinity", "containment",
       NODE + "---\n" + pod(extra_spec="affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
                                       "{nodeSelectorTerms: [{matchExpressions: {key: a}}]}}}, "),
       names=("Pod default/p", "spec.affinity.nodeAffinity")),
    _c("raw-allocatable 1e400 on one node", "containment",
       "kind: Node\nmetadata: {name: n, annotations: {node.koordinator.sh/raw-allocatable: '{\"cpu\": 1e400}'}}\n"
       "status: {allocatable: {cpu: '4', memory: 8Gi}}\n---\n" + NODE2 + "---\n" + pod(),
       expect="ok", bound=("default/p",)),
    # -- 6: accepted silently where a user needs to hear about it ------------------------------------------
    _c("two pods share a UID", "silent",
       NODE + "---\n" + pod("a", meta="uid: u1") + "---\n" + pod("b", meta="uid: u1"),
       names=("Pod default/b", "uid", "u1")),
    _c("duplicate NodeMetric", "silent",
       NODE + "---\nkind: NodeMetric\nmetadata: {name: n}\n---\nkind: NodeMetric\nmetadata: {name: n}\n",
       names=("duplicate NodeMetric n",)),
    _c("kind pod", "silent", NODE + "---\n" + pod().replace("kind: Pod", "kind: pod"), names=("'pod'", "Pod")),
    _c("kind 'Node '", "silent", "kind: 'Node '\nmetadata: {name: n}\n", names=("Node",)),
    _c("non-string name", "silent", "kind: Node\nmetadata: {name: [a]}\n", names=("metadata.name", "string")),
    _c("second profile dropped", "silent", NODE,
       profile="kind: KubeSchedulerConfiguration\nprofiles: [{schedulerName: a}, {schedulerName: b}]\n",
       names=("profile.yaml", "profiles")),
    _c("percentageOfNodesToScore 500", "silent", NODE, profile="percentageOfNodesToScore: 500\n",
       names=("percentageOfNodesToScore",)),
    _c("float for an int arg is not truncated", "silent", NODE,
       profile="pluginConfig: {be_suppress: {cpuSuppressThresholdPercent: 65.7}}\n",
       names=("profile.yaml", "pluginConfig.be_suppress.cpuSuppressThresholdPercent", "65.7")),
    _c("NaN float arg", "numbers", NODE, profile="pluginConfig: {gpu_share: {lpCpuMargin: .nan}}\n",
       names=("pluginConfig.gpu_share.lpCpuMargin", "finite")),
    _c("namespaced NodeMetric is the node's", "silent",
       NODE + "---\nkind: NodeMetric\nmetadata: {name: n, namespace: x}\n---\n"
       "kind: NodeMetric\nmetadata: {name: n}\n", names=("duplicate NodeMetric n",)),
    Case("duplicate Pod names both files", "silent", {"a.yaml": pod(), "b.yaml": pod()},
         ("simulate", "{dir}/a.yaml", "{dir}/b.yaml"), names=("a.yaml", "b.yaml", "duplicate Pod default/p")),
]
