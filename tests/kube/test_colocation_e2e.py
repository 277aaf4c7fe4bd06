"""Colocation on a cluster, from zero (issue 18; docs/kubernetes.md has the same steps for a real cluster).

One process, the fake API server, and the three components built from their deploy/ command lines as
``koordfw manager`` (with the webhook), ``koordfw scheduler`` and ``koordfw agent`` build them, the agent on a
fake cgroup/proc/sys tree and a virtual clock that the manager reads too (NodeMetric ages):

1. what ``kubectl apply`` creates: deploy/namespace.yaml, deploy/priorityclasses.yaml,
   deploy/slo-controller-config.yaml (colocation enabled), examples/kubernetes/colocation-profile.yaml, a
   namespace labelled for it, a node with an online (koord-prod, LS) pod and a host application;
2. the manager renders the node's NodeSLO, which the running agent applies (be_suppress's threshold);
3. the agent publishes the NodeMetric; the manager patches ``kubernetes.io/batch-cpu``/``batch-memory``
   into Node.status;
4. the pod of examples/kubernetes/batch-job.yaml (plain cpu/memory) goes through the manager's webhook:
   an AdmissionReview POSTed over HTTPS to /mutate-pod and /validate-pod, the JSONPatch applied with
   ``jsonpatch``, the pod created: BE, koord-batch, koordfw-scheduler, batch-cpu/batch-memory;
5. the scheduler binds it; the agent throttles the besteffort cgroup as its NodeSLO says;
6. a change of slo-controller-config reaches the running agent through the re-rendered NodeSLO;
7. the agent stops: its NodeMetric goes stale and the manager removes the batch resources (Koordinator's
   degrade); a new agent reports again and they come back.
"""

from __future__ import annotations

import argparse
import base64
import copy
import datetime as dt
import json
import ssl
import subprocess
import time
from pathlib import Path

import aiohttp
import anyio
import jsonpatch
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
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.engines.kube.leader import LeaderElector
from koordfw.engines.kube.manager import KubeManager
from koordfw.engines.kube.node import NodeOnCluster
from koordfw.extension import BATCH_CPU, BATCH_MEMORY
from koordfw.testing.cgroups import FakeNode

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
EXAMPLES = ROOT / "examples" / "kubernetes"
DOC = ROOT / "docs" / "kubernetes.md"

NCPU = 8
G = 2**30
NODE = "n1"
BATCH_NS = "batch"
CONFIG_NS = "koordfw-system"


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def workload_args(path: Path, kind: str) -> list[str]:
    """The first container's args of the one ``kind`` workload in ``path``."""
    [w] = [d for d in documents(path) if d["kind"] == kind]
    return list(w["spec"]["template"]["spec"]["containers"][0]["args"])


def command_line(args: list[str], kubeconfig: Path, **flags: str) -> argparse.Namespace:
    """A deploy/ command line as koordfw parses it, run outside the cluster: ``--in-cluster`` becomes
    ``--kubeconfig``, and each ``flags`` entry (``cgroup_root="..."``) replaces that flag's value ('' drops)."""
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


def build_agent(machine: Machine, kubeconfig: Path, clock: VirtualClock, tmp: Path) -> tuple[Agent, NodeOnCluster]:
    """``koordfw agent`` as deploy/agent.yaml runs it (KubeClient aside), on the fake tree and clock."""
    f = machine.fake
    args = command_line(workload_args(DEPLOY / "agent.yaml", "DaemonSet"), kubeconfig, node_name=NODE,
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

    # 1. kubectl apply: the namespace, the priority classes, slo-controller-config, the profile; a labelled namespace
    for path in (DEPLOY / "namespace.yaml", DEPLOY / "priorityclasses.yaml", DEPLOY / "slo-controller-config.yaml",
                 EXAMPLES / "colocation-profile.yaml"):
        for doc in documents(path):
            api.create(doc)
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BATCH_NS}})
    api.update("namespaces", BATCH_NS, lambda o: o["metadata"]["labels"].update(
        {"koordinator.sh/enable-colocation": "true"}))  # kubectl label namespace batch ...
    api.create(node_manifest())
    web = api.create(online_pod())
    machine = Machine(tmp_path / "node", web["metadata"]["uid"], clock.now())

    # the manager and its webhook, as deploy/manager.yaml runs them (a self-signed serving certificate)
    cert, key = self_signed(tmp_path)
    margs = command_line(workload_args(DEPLOY / "manager.yaml", "Deployment"), kubeconfig,
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
    [profile_cm] = [d for d in documents(DEPLOY / "scheduler.yaml") if d["kind"] == "ConfigMap"]
    (tmp_path / "profile.yaml").write_text(profile_cm["data"]["profile.yaml"])
    sargs = command_line(workload_args(DEPLOY / "scheduler.yaml", "Deployment"), kubeconfig,
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
    agent, aargs = build_agent(machine, kubeconfig, clock, tmp_path)
    aclient = await KubeClient.from_kubeconfig(aargs.kubeconfig)
    node_agent = node_on_cluster(agent, aclient, aargs)
    tls = ssl.create_default_context(cafile=cert)

    kubectl = KubeClient(api.url, qps=0)

    async with mclient, sclient, aclient, kubectl, anyio.create_task_group() as tg:
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

        # 4. the Job's pod through the webhook, as the API server calls it, then created
        [job] = documents(EXAMPLES / "batch-job.yaml")
        pod = job_pod(job, "x7k2p")
        out = await post(port, "/mutate-pod", review(pod, "review-1"), tls)
        resp = out["response"]
        assert resp["uid"] == "review-1" and resp["allowed"] is True and resp["patchType"] == "JSONPatch"
        pod = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(resp["patch"])))
        out = await post(port, "/validate-pod", review(pod, "review-2"), tls)
        assert out["response"]["allowed"] is True
        created = await kubectl.request("POST", f"/api/v1/namespaces/{BATCH_NS}/pods", body=pod)
        labels = created["metadata"]["labels"]
        assert labels["koordinator.sh/qosClass"] == "BE" and labels["koordinator.sh/priority"] == "1000"
        assert labels["koordinator.sh/mutated"] == "true" and labels["job-name"] == "spark-pi"
        spec = created["spec"]
        assert (spec["priorityClassName"], spec["priority"], spec["schedulerName"]) == (
            "koord-batch", 5000, "koordfw-scheduler")
        batch = {BATCH_CPU: "2k", BATCH_MEMORY: "4Gi"}
        assert spec["containers"][0]["resources"] == {"requests": batch, "limits": batch}

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
        assert api.get("pods", name, BATCH_NS)["spec"]["nodeName"] == NODE
        # a new agent (the DaemonSet's next pod) reports: fresh again, the batch resources come back
        agent, aargs = build_agent(machine, kubeconfig, clock, tmp_path)
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
