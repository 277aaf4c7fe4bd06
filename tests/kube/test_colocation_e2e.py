"""Colocation on a cluster, from zero (issue 18): docs/kubernetes.md's walkthrough of that name, performed.

One process: the fake API server, and the three components built from the command lines of the Deployments
and the DaemonSet the walkthrough applies, as ``koordfw manager`` (with its webhook, on TLS), ``koordfw
scheduler`` and ``koordfw agent`` build them; the agent on a fake cgroup/proc/sys tree and a virtual clock
that the manager reads too (NodeMetric ages). The walkthrough's ``kubectl`` commands are read from the doc
and done on the fake (:class:`Kubectl`), so the doc and this test cannot drift apart:

1. the install (CRDs, PriorityClasses, the namespace, slo-controller-config with colocation enabled, the
   manager and deploy/webhook.yaml, the scheduler, the agent) on a cluster with one node running an online
   (koord-prod, LS) pod and a host application;
2. the manager renders the node's NodeSLO, which the agent applies (be_suppress's threshold: the
   besteffort cpuset);
3. the agent publishes the NodeMetric; the manager patches ``kubernetes.io/batch-cpu``/``batch-memory``
   into Node.status (the figures the doc quotes);
4. examples/kubernetes/colocation-profile.yaml and a labelled namespace; the pod of
   examples/kubernetes/batch-job.yaml (plain cpu/memory) goes through the webhooks deploy/webhook.yaml
   registers: AdmissionReviews POSTed over HTTPS, the JSONPatch applied with ``jsonpatch``, the pod created:
   BE, koord-batch, koordfw-scheduler, batch-cpu/batch-memory;
5. the scheduler binds it; the kubelet's part (its BestEffort cgroup) is played; the agent keeps it to the
   NodeSLO's BE share;
6. a change of slo-controller-config reaches the running agent through the re-rendered NodeSLO;
7. the agent stops: its NodeMetric goes stale and the manager removes the batch resources (Koordinator's
   degrade); a new agent reports and they come back.
"""

from __future__ import annotations

import argparse
import base64
import copy
import datetime as dt
import json
import re
import shlex
import ssl
import subprocess
import time
from pathlib import Path

import aiohttp
import anyio
import jsonpatch
import pytest
import yaml
from kube_testkit import wait_for

from koordfw.agent.cgroups import CgroupLayout, detect_version, resolve_driver
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.cli import build_parser
from koordfw.commands._common import registry_from_args
from koordfw.commands.agent import _load_registry
from koordfw.commands.manager import build_controllers
from koordfw.commands.scheduler import make_client
from koordfw.core.clock import VirtualClock
from koordfw.core.model import selector_matches
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.engines.kube.leader import LeaderElector
from koordfw.engines.kube.manager import KubeManager
from koordfw.engines.kube.node import NodeOnCluster
from koordfw.extension import BATCH_CPU, BATCH_MEMORY
from koordfw.testing.cgroups import FakeNode
from koordfw.testing.fake_apiserver import RESOURCES

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
EXAMPLES = ROOT / "examples" / "kubernetes"
DOC = ROOT / "docs" / "kubernetes.md"
SECTION = "## Colocation on a cluster, from zero"

NCPU = 8
G = 2**30
NODE = "n1"
BATCH_NS = "batch"
CONFIG_NS = "koordfw-system"


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def walkthrough() -> list[list[list[str]]]:
    """The commands of docs/kubernetes.md's "Colocation on a cluster, from zero", per code block (``\\``
    continuations joined, ``for`` loop bodies included)."""
    text = DOC.read_text()
    start = text.index(f"\n{SECTION}\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = []
    for block in re.findall(r"^```\n(.*?)^```$", section, re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        blocks.append([shlex.split(line.strip()) for line in joined.splitlines()
                       if line.strip().startswith("kubectl ")])
    return blocks


#: the API groups of the objects deploy/ and examples/kubernetes/ hold that are not custom resources
BUILTIN_GROUPS = {"", "apps", "batch", "policy", "admissionregistration.k8s.io", "apiextensions.k8s.io",
                  "coordination.k8s.io", "events.k8s.io", "rbac.authorization.k8s.io", "scheduling.k8s.io"}
#: the kinds the fake API server serves, by (apiVersion, kind)
SERVED = {(rt.api_version, rt.kind): rt for rt in RESOURCES.values()}


class Kubectl:
    """What the walkthrough's ``kubectl`` commands change, done on the fake API server, with the API server's
    checks the order depends on: a namespaced object needs its namespace (NamespaceLifecycle), a custom
    resource its CRD. Reads (get, wait), the certificate's Secret and the caBundle patch are the test's own
    (it makes its own certificate); objects of kinds the fake does not serve (workloads, RBAC, Services,
    webhook configurations, Jobs) are kept in :attr:`applied` for the test to play their controllers."""

    def __init__(self, api) -> None:
        self.api = api
        self.applied: list[dict] = []
        self.crds: set[tuple[str, str]] = set()

    def run(self, cmd: list[str]) -> None:
        assert cmd[0] == "kubectl"
        if cmd[1] == "apply":
            files = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-f"]
            assert files and len(files) == cmd.count("-f"), cmd
            for f in files:
                path = ROOT / f
                assert path.exists(), f"{f}: no such file or directory"
                for p in sorted(path.glob("*.yaml")) if path.is_dir() else [path]:
                    for doc in documents(p):
                        self.apply(doc)
        elif cmd[1:3] == ["create", "namespace"]:
            self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": cmd[3]}})
        elif cmd[1:3] == ["label", "namespace"]:
            labels = dict(kv.split("=", 1) for kv in cmd[4:])
            self.api.update("namespaces", cmd[3], lambda o: o["metadata"]["labels"].update(labels))

    def apply(self, doc: dict) -> None:
        api_version, kind, meta = doc["apiVersion"], doc["kind"], doc["metadata"]
        if api_version.rpartition("/")[0] not in BUILTIN_GROUPS:
            assert (api_version, kind) in self.crds, f"{kind} {meta['name']}: its CRD is not installed yet"
        ns = meta.get("namespace")
        if ns is not None:
            assert self.api.get("namespaces", ns) is not None, f'{kind} {meta["name"]}: namespaces "{ns}" not found'
        if kind == "CustomResourceDefinition":
            spec = doc["spec"]
            for v in spec["versions"]:
                gv = f"{spec['group']}/{v['name']}"
                self.crds.add((gv, spec["names"]["kind"]))
                rt = SERVED.get((gv, spec["names"]["kind"]))
                if rt is not None:  # the fake serves it as the CRD says (ElasticQuota, PodGroup: not used here)
                    assert (rt.plural, rt.namespaced) == (spec["names"]["plural"], spec["scope"] == "Namespaced")
        elif (api_version, kind) in SERVED:
            self.api.create(copy.deepcopy(doc))
        self.applied.append(doc)

    def one(self, kind: str, name: str) -> dict:
        [d] = [d for d in self.applied if d["kind"] == kind and d["metadata"]["name"] == name]
        return d


def workload_args(workload: dict) -> list[str]:
    """The first container's args of a Deployment or DaemonSet."""
    return list(workload["spec"]["template"]["spec"]["containers"][0]["args"])


def command_line(args: list[str], kubeconfig: Path, **flags: str | None) -> argparse.Namespace:
    """A deploy/ command line as koordfw parses it, run outside the cluster: ``--in-cluster`` becomes
    ``--kubeconfig``, and each ``flags`` entry (``cgroup_root="..."``) replaces that flag's value or adds it
    (None drops the flag)."""
    out = []
    for a in args:
        name = a.split("=", 1)[0]
        key = name.removeprefix("--").replace("-", "_")
        if a == "--in-cluster":
            out.append(f"--kubeconfig={kubeconfig}")
        elif key in flags:
            if flags[key] is not None:
                out.append(f"{name}={flags.pop(key)}")
            else:
                flags.pop(key)
        else:
            out.append(a)
    out += [f"--{k.replace('_', '-')}={v}" for k, v in flags.items() if v is not None]
    return build_parser().parse_args(out)


def self_signed(tmp: Path) -> tuple[str, str]:
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return str(cert), str(key)


def node_manifest() -> dict:
    alloc = {"cpu": str(NCPU), "memory": "32Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
            "spec": {}, "status": {"capacity": dict(alloc), "allocatable": dict(alloc)}}


def online_pod() -> dict:
    """A latency-sensitive service already running on the node (koord-prod, LS)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "labels": {"koordinator.sh/qosClass": "LS"}},
            "spec": {"nodeName": NODE, "priorityClassName": "koord-prod", "priority": 9000,
                     "containers": [{"name": "web", "image": "nginx",
                                     "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]},
            "status": {"phase": "Running"}}


def job_pod(job: dict, suffix: str) -> dict:
    """The pod the Job controller creates from ``job``'s template (its labels and owner reference)."""
    name, ns, uid = job["metadata"]["name"], job["metadata"]["namespace"], "5b1c4c1e-0000-4000-8000-00000000j0b1"
    tmpl = copy.deepcopy(job["spec"]["template"])
    labels = {**(tmpl.get("metadata") or {}).get("labels", {}), "batch.kubernetes.io/controller-uid": uid,
              "batch.kubernetes.io/job-name": name, "controller-uid": uid, "job-name": name}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{suffix}", "namespace": ns, "labels": labels,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": tmpl["spec"]}


def review(pod: dict, uid: str) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                        "namespace": pod["metadata"]["namespace"], "operation": "CREATE",
                        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
                        "object": pod, "oldObject": None, "dryRun": False}}


class Machine:
    """The node's kernel side: the fake cgroup tree with the kubelet's QoS dirs, the online pod, the host
    application nginx (deploy/slo-controller-config.yaml's host-application-config) and later the batch pod,
    each busy at a fixed rate (cores, read through cumulative counters at virtual time ``t``) and holding a
    fixed amount of memory; the node's own processes use :attr:`SYSTEM_CPU` cores and :attr:`SYSTEM_MEMORY`."""

    SYSTEM_CPU = 0.5
    SYSTEM_MEMORY = 6 * G + 3 * G // 4

    def __init__(self, tmp: Path, web_uid: str, start: float) -> None:
        self.fake = FakeNode(tmp, ncpu=NCPU)
        self.start = start
        self.rates: dict[str, float] = {}
        self.memory: dict[str, int] = {}
        self.since: dict[str, float] = {}
        self.web = self.fake.add_pod(web_uid, "burstable")
        self.app = "host-latency-sensitive/nginx"
        self.fake.mkcg(self.app)
        self.run(self.web, 1.0, 1 * G)
        self.run(self.app, 0.5, G // 4)

    def run(self, rel: str, cores: float, memory: int, since: float | None = None) -> None:
        """``rel`` busy from virtual time ``since`` (default: the start) on."""
        self.rates[rel], self.memory[rel] = cores, memory
        self.since[rel] = self.start if since is None else since
        (self.fake.ctl("memory", rel) / "memory.usage_in_bytes").write_text(f"{memory}\n")
        used_kb = (self.SYSTEM_MEMORY + sum(self.memory.values())) // 1024
        (self.fake.proc / "meminfo").write_text(f"MemTotal:       {32 * G // 1024} kB\n"
                                                f"MemAvailable:   {32 * G // 1024 - used_kb} kB\n")

    def tick(self, t: float) -> None:
        """The cumulative counters at virtual time ``t``."""
        busy = {rel: cores * max(t - self.since[rel], 0.0) for rel, cores in self.rates.items()}
        self.fake.set_proc_stat(int((self.SYSTEM_CPU * (t - self.start) + sum(busy.values())) * 1e9))
        for rel, seconds in busy.items():
            self.fake.set_usage(rel, int(seconds * 1e9))


def build_agent(daemonset: dict, machine: Machine, kubeconfig: Path, clock: VirtualClock, tmp: Path
                ) -> tuple[Agent, argparse.Namespace]:
    """``koordfw agent`` as the DaemonSet runs it (KubeClient aside), on the fake tree and clock."""
    f = machine.fake
    args = command_line(workload_args(daemonset), kubeconfig, node_name=NODE,
                        cgroup_root=str(f.root), resctrl_root=str(tmp / "resctrl"), log_format=None)
    version = args.cgroup_version or detect_version(args.cgroup_root)
    driver, kubepods = resolve_driver(args.cgroup_root, version, args.cgroup_driver, args.kubepods)
    registry = _load_registry(args.config, args.disable)
    executor = Executor({"cgroup": args.cgroup_root, "resctrl": args.resctrl_root}, dry_run=args.dry_run,
                        cgroup_version=version)
    agent = Agent(registry, CgroupLayout(Path(args.cgroup_root), version, driver, kubepods), executor,
                  interval=args.interval, node_name=args.node_name, proc_root=str(f.proc), sys_root=str(f.sys),
                  clock=clock)
    return agent, args


def node_on_cluster(agent: Agent, client: KubeClient, args: argparse.Namespace) -> NodeOnCluster:
    """The agent's cluster side with the options ``koordfw agent`` passes (no NVML here: no Device)."""
    return NodeOnCluster(agent, client, publish_interval=args.node_metric_interval or None,
                         topology_interval=args.topology_interval or None,
                         device_interval=args.device_interval or None, kubelet_config=args.kubelet_config,
                         kubelet_root=args.kubelet_root_dir, resctrl_root=args.resctrl_root)


async def wait_until(pred, what: str, timeout: float = 15.0) -> None:
    with anyio.fail_after(timeout):
        while not pred():
            await anyio.sleep(0.005)


async def step(machine: Machine, agent: Agent, clock: VirtualClock, seconds: int = 1) -> None:
    """Advance the virtual clock second by second, one agent round each."""
    for _ in range(seconds):
        target = agent.rounds + 1
        machine.tick(clock.now() + 1)
        clock.advance(1.0)
        await wait_until(lambda t=target: agent.rounds >= t, "an agent round")


def batch_of(api) -> tuple[str | None, str | None]:
    st = api.get("nodes", NODE)["status"]
    assert (st["allocatable"].get(BATCH_CPU), st["allocatable"].get(BATCH_MEMORY)) == \
        (st["capacity"].get(BATCH_CPU), st["capacity"].get(BATCH_MEMORY))
    return st["allocatable"].get(BATCH_CPU), st["allocatable"].get(BATCH_MEMORY)


def be_cpuset(machine: Machine) -> str:
    return machine.fake.read("cpuset", machine.fake.qos("besteffort"), "cpuset.cpus")


def rfc3339_seconds(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


async def caught_up(manager: KubeManager, kind: str, obj: dict) -> None:
    """Wait until the manager's cache holds this version of the object."""
    rv = obj["metadata"]["resourceVersion"]
    await wait_for(lambda: any(o["metadata"]["resourceVersion"] == rv for o in manager.reflectors[kind].store.values()),
                   what=f"{kind} cached")


async def resync(ctl) -> None:
    """One resync period's pass of the node-resources controller, finished."""
    ctl.resync()
    with anyio.fail_after(10):
        await ctl.settled()


async def post(port: int, path: str, body: dict, ctx: ssl.SSLContext) -> dict:
    async with aiohttp.ClientSession() as s, s.post(f"https://127.0.0.1:{port}{path}", json=body, ssl=ctx) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def test_colocation_from_zero(api, tmp_path):
    # the scheduler's clock is the wall clock (load_aware refuses nodes whose NodeMetric is older than 180 s
    # by it): the virtual clock of the agent and the manager starts at the wall clock's second
    clock = VirtualClock(float(int(time.time())))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(api.kubeconfig()))

    blocks = walkthrough()
    install, _, onboard, submit = blocks[:4]
    kubectl = Kubectl(api)
    # a node with an online service (what the cluster had before)
    api.create(node_manifest())
    web = api.create(online_pod())
    machine = Machine(tmp_path / "node", web["metadata"]["uid"], clock.now())

    # 1. install, as the walkthrough applies deploy/
    for cmd in install:
        kubectl.run(cmd)
    assert {d["kind"] for d in kubectl.applied} >= {"CustomResourceDefinition", "PriorityClass", "Namespace",
                                                    "ConfigMap", "Deployment", "DaemonSet",
                                                    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    # the manager and its webhook, as deploy/manager.yaml runs them (a self-signed serving certificate)
    cert, key = self_signed(tmp_path)
    margs = command_line(workload_args(kubectl.one("Deployment", "koordfw-manager")), kubeconfig,
                         webhook_listen="127.0.0.1:0", tls_cert_file=cert, tls_private_key_file=key,
                         health_address="", log_format=None, resync_period="3600")
    mclient = await make_client(margs)
    elector = LeaderElector(mclient, namespace=margs.leader_elect_namespace, name=margs.leader_elect_name,
                            identity="manager-0", lease_duration=margs.leader_elect_lease_duration,
                            renew_deadline=margs.leader_elect_renew_deadline,
                            retry_period=margs.leader_elect_retry_period)
    controllers = build_controllers(margs)
    ctl = {c.name: c for c in controllers}
    manager = KubeManager(registry_from_args(margs), mclient, controllers=controllers,
                          config_namespace=margs.config_namespace, leader_elector=elector, clock=clock.now)
    # the scheduler, as deploy/scheduler.yaml runs it (its profile from the ConfigMap it mounts)
    profile_cm = api.get("configmaps", "koordfw-scheduler-profile", CONFIG_NS)
    (tmp_path / "profile.yaml").write_text(profile_cm["data"]["profile.yaml"])
    sargs = command_line(workload_args(kubectl.one("Deployment", "koordfw-scheduler")), kubeconfig,
                         profile=str(tmp_path / "profile.yaml"), health_address="", log_format=None)
    sclient = await make_client(sargs)
    sched_elector = LeaderElector(sclient, namespace=sargs.leader_elect_namespace,
                                  name=sargs.leader_elect_name or sargs.scheduler_name, identity="scheduler-0",
                                  lease_duration=sargs.leader_elect_lease_duration,
                                  renew_deadline=sargs.leader_elect_renew_deadline,
                                  retry_period=sargs.leader_elect_retry_period)
    scheduler = KubeSchedulerEngine(registry_from_args(sargs), sclient, scheduler_name=sargs.scheduler_name,
                                    seed=sargs.seed, identity="scheduler-0", leader_elector=sched_elector)
    # the agent, as deploy/agent.yaml runs it
    agent, aargs = build_agent(kubectl.one("DaemonSet", "koordfw-agent"), machine, kubeconfig, clock, tmp_path)
    aclient = await KubeClient.from_kubeconfig(aargs.kubeconfig)
    node_agent = node_on_cluster(agent, aclient, aargs)
    tls = ssl.create_default_context(cafile=cert)

    user = KubeClient(api.url, qps=0)  # what the Job controller creates pods with

    async with mclient, sclient, aclient, user, anyio.create_task_group() as tg:
        tg.start_soon(manager.run)
        tg.start_soon(scheduler.run)
        with anyio.fail_after(20):
            await manager.started.wait()
            await scheduler.started.wait()
        webhook = ctl["webhook"]
        await wait_for(lambda: webhook.listening.is_set() and webhook.bound_port, what="the webhook listening")
        port = webhook.bound_port

        async def ready() -> bool:
            async with aiohttp.ClientSession() as s, s.get(f"https://127.0.0.1:{port}/readyz", ssl=tls) as r:
                return r.status == 200

        with anyio.fail_after(15):
            while not await ready():
                await anyio.sleep(0.02)

        # 2. the manager renders the node's NodeSLO from slo-controller-config; the agent starts on it
        await wait_for(lambda: api.get("nodeslos", NODE) is not None, what="the NodeSLO")
        slo = api.get("nodeslos", NODE)["spec"]
        assert slo["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 65
        assert slo["resourceUsedThresholdWithBE"]["cpuSuppressPolicy"] == "cpuset"
        assert [a["name"] for a in slo["hostApplications"]] == ["nginx"]
        agent_scope = anyio.CancelScope()
        agent_done = anyio.Event()

        async def run_agent(on: NodeOnCluster, scope: anyio.CancelScope, done: anyio.Event) -> None:
            with scope:
                await on.run(handle_signals=False)
            done.set()

        tg.start_soon(run_agent, node_agent, agent_scope, agent_done)
        await wait_until(lambda: agent.rounds >= 1, "the agent's first round")
        be_args = agent.registry.args["be_suppress"]
        assert node_agent.slo is not None and node_agent.slo_applied == 1
        assert be_args.cpu_suppress_threshold_percent == 65 and be_args.cpu_suppress_policy == "cpuset"
        assert [a.name for a in agent.host_apps] == ["nginx"]
        await step(machine, agent, clock, 1)  # usage is a rate: the second round has it
        # 8000m * 65 % - web 1000m - nginx 500m - system 500m = 3200m: 4 CPUs for the besteffort cgroup
        assert be_cpuset(machine) == "0-1,4-5"

        # 3. the agent publishes the NodeMetric every reportIntervalSeconds (60); the manager writes the batch
        # resources: 8000m - 40 % margin - (system 500m + nginx 500m, a koord-prod host application) - web 1000m
        await step(machine, agent, clock, 59)
        await wait_for(lambda: batch_of(api)[0] is not None, what="batch resources in Node.status")
        metric = api.get("nodemetrics", NODE)["status"]
        assert metric["nodeMetric"]["systemUsage"]["resources"] == {"cpu": "500m", "memory": "6912Mi"}
        # memory: 32Gi - 35 % - (system 6.75Gi + nginx 0.25Gi) - web 1Gi
        expected_batch = ("2800", str(32 * G - int(32 * G * 0.35) - 7 * G - 1 * G))
        assert batch_of(api) == expected_batch

        # 4. the profile and a labelled namespace, as the walkthrough creates them; the webhook's caches see them
        for cmd in onboard:
            kubectl.run(cmd)
        profile = api.get("clustercolocationprofiles", "colocation-batch")
        namespace = api.get("namespaces", BATCH_NS)
        assert namespace["metadata"]["labels"]["koordinator.sh/enable-colocation"] == "true"
        for kind, obj in (("ClusterColocationProfile", profile), ("Namespace", namespace)):
            refl = next(r for (_, k), r in webhook.reflectors.items() if k == kind)
            await wait_for(lambda r=refl, o=obj: any(c["metadata"]["resourceVersion"] == o["metadata"]["resourceVersion"]
                                                     for c in r.store.values()), what=f"the webhook's {kind}")
        # the Job, and the pod its controller creates, through the webhooks deploy/webhook.yaml registers for it
        for cmd in submit:
            kubectl.run(cmd)
        pod = job_pod(kubectl.one("Job", "spark-pi"), "x7k2p")
        paths = {}
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            [cfg] = [d for d in kubectl.applied if d["kind"] == kind]
            [hook] = cfg["webhooks"]
            assert selector_matches(hook["namespaceSelector"], namespace["metadata"]["labels"])
            assert any("CREATE" in r["operations"] and "pods" in r["resources"] and r["apiGroups"] == [""]
                       for r in hook["rules"])
            svc = hook["clientConfig"]["service"]
            assert kubectl.one("Service", svc["name"])["spec"]["ports"][0]["targetPort"] == "webhook"
            paths[kind] = svc["path"]
        out = await post(port, paths["MutatingWebhookConfiguration"], review(pod, "review-1"), tls)
        resp = out["response"]
        assert resp["uid"] == "review-1" and resp["allowed"] is True and resp["patchType"] == "JSONPatch"
        pod = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(resp["patch"])))
        out = await post(port, paths["ValidatingWebhookConfiguration"], review(pod, "review-2"), tls)
        assert out["response"]["allowed"] is True
        created = await user.request("POST", f"/api/v1/namespaces/{BATCH_NS}/pods", body=pod)
        labels = created["metadata"]["labels"]
        assert labels["koordinator.sh/qosClass"] == "BE" and labels["koordinator.sh/priority"] == "1000"
        assert labels["koordinator.sh/mutated"] == "true" and labels["job-name"] == "spark-pi"
        spec = created["spec"]
        assert (spec["priorityClassName"], spec["priority"], spec["schedulerName"]) == (
            "koord-batch", 5000, "koordfw-scheduler")
        batch = {BATCH_CPU: "2k", BATCH_MEMORY: "4Gi"}
        assert spec["containers"][0]["resources"] == {"requests": batch, "limits": batch}
        assert json.loads(created["metadata"]["annotations"]["node.koordinator.sh/extended-resource-spec"]) == {
            "containers": {"spark": {"requests": batch, "limits": batch}}}

        # 5. the scheduler binds it on the batch resources
        name, uid = created["metadata"]["name"], created["metadata"]["uid"]
        await wait_for(lambda: api.get("pods", name, BATCH_NS)["spec"].get("nodeName") == NODE,
                       what="the batch pod bound")
        assert [uid] == [u for u, n in api.bind_log]
        await wait_for(lambda: any(e["reason"] == "Scheduled" and e["regarding"]["uid"] == uid
                                   for e in api.objects["events"].values()), what="the Scheduled event")

        # ... and the kubelet starts it: only extended resources make it a BestEffort pod (its cgroup under
        # besteffort), busy on 1 core and 2Gi; the running agent limits it to the NodeSLO's BE share
        be_dir = machine.fake.add_pod(uid, "besteffort")
        machine.run(be_dir, 1.0, 2 * G, since=clock.now())
        api.update("pods", name, lambda o: o.setdefault("status", {}).update(phase="Running"), BATCH_NS)
        await wait_until(lambda: any(p.uid == uid and p.phase == "Running" for p in node_agent.src.source.pods()),
                         "the agent sees the batch pod")
        await step(machine, agent, clock, 1)
        # a new cgroup has no usage rate in its first round: the node's extra core counts as system for
        # that round (5200m - 1000m - 500m - 1500m = 2200m: 3 CPUs), then scaling up (1 CPU a round) gets to
        # 8000m * 65 % - web 1000m - nginx 500m - system 500m = 3200m again (BE usage is not subtracted)
        assert be_cpuset(machine) == "0-1,4"
        await step(machine, agent, clock, 1)
        assert be_cpuset(machine) == "0-1,4-5"
        assert machine.fake.read("cpuset", be_dir, "cpuset.cpus") == "0-1,4-5"
        assert machine.fake.read("cpuset", f"{be_dir}/c1", "cpuset.cpus") == "0-1,4-5"
        # the next NodeMetric counts the batch pod as batch: Node.status keeps the same batch resources
        published = node_agent.publisher.published
        await step(machine, agent, clock, 60)
        await wait_until(lambda: node_agent.publisher.published == published + 1, "the next NodeMetric")
        pods_metric = api.get("nodemetrics", NODE)["status"]["podsMetric"]
        assert {(m["name"], m["qos"], m["priority"]) for m in pods_metric} == {
            ("web", "LS", "koord-prod"), (name, "BE", "koord-batch")}
        # the one round where the new pod's core counted as system is in the 5-minute average: 508m; batch-cpu
        # would be 2792, within resourceDiffThreshold (10 %) of 2800: not written before updateTimeThresholdSeconds
        assert api.get("nodemetrics", NODE)["status"]["nodeMetric"]["systemUsage"]["resources"]["cpu"] == "508m"
        await caught_up(manager, "NodeMetric", api.get("nodemetrics", NODE))
        await resync(ctl["noderesource"])
        assert batch_of(api) == expected_batch

        # 6. the operator lowers the BE threshold in slo-controller-config: the manager re-renders the NodeSLO
        # and the running agent (same process, same rounds) applies it at its next round
        def lower(cm: dict) -> None:
            cfg = json.loads(cm["data"]["resource-threshold-config"])
            cfg["clusterStrategy"]["cpuSuppressThresholdPercent"] = 40
            cm["data"]["resource-threshold-config"] = json.dumps(cfg)

        ev, rounds = node_agent.slo_event, agent.rounds
        api.update("configmaps", "slo-controller-config", lower, CONFIG_NS)
        with anyio.fail_after(15):
            await ev.wait()
        assert api.get("nodeslos", NODE)["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 40
        assert node_agent.slo_applied == 2 and not node_agent.slo_errors and agent.rounds == rounds
        assert agent.registry.args["be_suppress"].cpu_suppress_threshold_percent == 40
        await step(machine, agent, clock, 1)
        # 8000m * 40 % - 1000m - 500m - 500m = 1200m: 2 CPUs, one whole core (cpu0 and cpu4 are siblings)
        assert be_cpuset(machine) == machine.fake.read("cpuset", be_dir, "cpuset.cpus") == "0,4"

        # 7. the agent goes away: its NodeMetric ages; strictly after degradeTimeMinutes (15) the manager
        # removes the batch resources (Koordinator's degrade resets them); the bound pod stays
        agent_scope.cancel()
        with anyio.fail_after(15):
            await agent_done.wait()
        updated = rfc3339_seconds(api.get("nodemetrics", NODE)["status"]["updateTime"])
        clock.advance_to(updated + 15 * 60)
        machine.tick(clock.now())  # the node's counters go on while no agent reads them
        await resync(ctl["noderesource"])
        # not stale yet (Go's now.After), but more than 300 s after the last write: the 2792 is written now
        assert batch_of(api) == ("2792", expected_batch[1])
        clock.advance(1)
        machine.tick(clock.now())
        await resync(ctl["noderesource"])
        await wait_for(lambda: batch_of(api) == (None, None), what="batch resources removed")
        await wait_for(lambda: BATCH_CPU not in scheduler.cluster.node(NODE).node.allocatable,
                       what="the scheduler sees no batch-cpu on the node")
        assert api.get("pods", name, BATCH_NS)["spec"]["nodeName"] == NODE
        # a new agent (the DaemonSet's next pod) reports: fresh again, the batch resources come back
        agent, aargs = build_agent(kubectl.one("DaemonSet", "koordfw-agent"), machine, kubeconfig, clock, tmp_path)
        node_agent = node_on_cluster(agent, aclient, aargs)
        tg.start_soon(run_agent, node_agent, anyio.CancelScope(), anyio.Event())
        await wait_until(lambda: agent.rounds >= 1, "the new agent's first round")
        assert node_agent.slo_applied == 1
        assert agent.registry.args["be_suppress"].cpu_suppress_threshold_percent == 40
        await step(machine, agent, clock, 60)
        await wait_until(lambda: node_agent.publisher.published == 1, "the new agent's NodeMetric")
        await wait_for(lambda: batch_of(api) == expected_batch, what="batch resources back")
        assert be_cpuset(machine) == "0,4"
        tg.cancel_scope.cancel()


async def test_the_walkthrough_names_existing_files_in_an_order_that_applies(api):
    """Every ``kubectl apply -f`` of the section names a file or directory that exists, and the commands in
    their order apply on an empty cluster: ``kubectl apply -f deploy/`` alone installs everything, since
    kubectl takes a directory's files in name order (not its subdirectories) and the CRDs and the namespace
    come first (``00-crd-*.yaml``, ``00-namespace.yaml``)."""
    blocks = walkthrough()
    applies = [c for b in blocks for c in b if c[1] == "apply"]
    assert [f for c in applies for f in c[2:] if f != "-f"] == [
        "deploy/", "examples/kubernetes/colocation-profile.yaml", "examples/kubernetes/batch-job.yaml"]
    kubectl = Kubectl(api)
    for b in blocks:
        for cmd in b:
            kubectl.run(cmd)
    assert {d["kind"] for d in kubectl.applied} >= {"Job", "ClusterColocationProfile", "DaemonSet"}
    # the Secret the walkthrough creates is the one the manager mounts, in its namespace
    [secret] = [c for b in blocks for c in b if c[3:6] == ["create", "secret", "tls"]]
    manager = kubectl.one("Deployment", "koordfw-manager")
    assert secret[1:3] == ["-n", manager["metadata"]["namespace"]]
    assert secret[6] in {v.get("secret", {}).get("secretName") for v in manager["spec"]["template"]["spec"]["volumes"]}
    # what the directory holds is exactly the deployment: every kind the walkthrough needs, no extender
    kinds = {(d["kind"], d["metadata"]["name"]) for d in kubectl.applied}
    assert {("CustomResourceDefinition", "nodeslos.slo.koordinator.sh"), ("Namespace", "koordfw-system"),
            ("Deployment", "koordfw-manager"), ("Deployment", "koordfw-scheduler"), ("DaemonSet", "koordfw-agent"),
            ("MutatingWebhookConfiguration", "koordfw-pod-mutating"), ("PriorityClass", "koord-batch"),
            ("ConfigMap", "slo-controller-config")} <= kinds
    assert not [d for d in kubectl.applied if d["kind"] == "Deployment" and "extender" in d["metadata"]["name"]]


def test_the_examples_are_valid():
    """The Job validates against the Kubernetes 1.31 schemas (as test_deploy checks deploy/), the profile
    against deploy/00-crd-clustercolocationprofile.yaml's schema and the colocation_profile plugin's parser."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    jsonschema = pytest.importorskip("jsonschema")
    from koordfw_colocation_profile.profile import parse_profile

    [job] = documents(EXAMPLES / "batch-job.yaml")
    kubernetes_validate.validate(job, "1.31.0", strict=True)
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    [crd] = documents(DEPLOY / "00-crd-clustercolocationprofile.yaml")
    [profile] = documents(EXAMPLES / "colocation-profile.yaml")
    [version] = [v for v in crd["spec"]["versions"] if f"{crd['spec']['group']}/{v['name']}" == profile["apiVersion"]]
    assert version["served"] and profile["kind"] == crd["spec"]["names"]["kind"]
    jsonschema.validate(profile, version["schema"]["openAPIV3Schema"])
    parsed = parse_profile(profile)
    assert (parsed.qos_class, parsed.priority_class_name, parsed.scheduler_name) == (
        "BE", "koord-batch", "koordfw-scheduler")
