"""``koordfw simulate`` on workloads (issue 32, point 1): Deployments, ReplicaSets, StatefulSets, Jobs,
CronJobs and DaemonSets become the pods kube's controllers create (names, counts, owner references,
labels and annotations from the template), admitted like bare pods, reported per owner; malformed
workloads exit 2 naming file, object and field; kinds simulate does not model are named in one warning."""

from __future__ import annotations

import calendar
import json
import re
from pathlib import Path

import pytest
import yaml

from koordfw.cli import main
from koordfw.core.cron import next_schedule
from koordfw.core.errors import ManifestError
from koordfw.core.manifests import load_objects
from koordfw.core.workloads import ALPHANUMS, daemon_tolerations, safe_encode, template_hash

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "workloads"
A = f"[{ALPHANUMS}]"


def node(name: str, labels: dict | None = None, taints: list | None = None, cpu: str = "8") -> dict:
    n: dict = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
               "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}}}
    if taints:
        n["spec"] = {"taints": taints}
    return n


def template(labels: dict | None = None, cpu: str = "1", **spec) -> dict:
    return {"metadata": {"labels": labels or {"app": "x"}, "annotations": {"team": "a"}},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}], **spec}}


def workload(kind: str, name: str, ns: str = "default", **spec) -> dict:
    api = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    if kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"):
        spec.setdefault("selector", {"matchLabels": {"app": "x"}})
    if kind != "CronJob":
        spec.setdefault("template", template(**({"restartPolicy": "Never"} if kind == "Job" else {})))
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": ns}, "spec": spec}


def owner(pod) -> tuple[str, str, str]:
    c = pod.controller
    return (c.kind, c.name, c.uid)


def simulate(tmp_path: Path, docs: list[dict], capsys, *extra: str) -> tuple[int, dict | str, str]:
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    rc = main(["simulate", str(f), "-o", "json", *extra])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else out.err), out.err


# -- each kind -------------------------------------------------------------------------------------------

def test_deployment_pods_come_through_a_replicaset_named_by_the_template_hash():
    m = load_objects([node("n1"), workload("Deployment", "web", "shop", replicas=3)])
    rs = [o for k, o in m.objects if k == "ReplicaSet"]
    assert len(rs) == 1
    rs_meta = rs[0]["metadata"]
    h = rs_meta["labels"]["pod-template-hash"]
    assert re.fullmatch(f"{A}{{1,10}}", h) and rs_meta["name"] == f"web-{h}"
    assert rs_meta["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                           "uid": rs_meta["ownerReferences"][0]["uid"], "controller": True,
                                           "blockOwnerDeletion": True}]
    assert len(m.pods) == 3 and len({p.name for p in m.pods}) == 3
    for p in m.pods:
        assert re.fullmatch(f"web-{h}-{A}{{5}}", p.name) and p.namespace == "shop"
        assert owner(p) == ("ReplicaSet", f"web-{h}", rs_meta["uid"])
        assert p.labels == {"app": "x", "pod-template-hash": h} and p.annotations == {"team": "a"}
        assert m.owners[p.key] == "Deployment shop/web"
    # deterministic, and the hash follows the template
    again = load_objects([node("n1"), workload("Deployment", "web", "shop", replicas=3)])
    assert [p.name for p in again.pods] == [p.name for p in m.pods]
    other = load_objects([workload("Deployment", "web", "shop", template=template(cpu="2"))])
    assert other.pods[0].labels["pod-template-hash"] != h


def test_template_hash_has_kubes_shape():
    assert safe_encode("0123456789") == "".join(ALPHANUMS[ord(c) % 27] for c in "0123456789")
    h = template_hash({"metadata": {"labels": {"app": "x"}}})
    assert re.fullmatch(f"{A}{{1,10}}", h) and h == template_hash({"metadata": {"labels": {"app": "x"}}})


def test_replicaset_replicas_default_and_zero():
    m = load_objects([workload("ReplicaSet", "rs"), workload("ReplicaSet", "none", replicas=0)])
    assert [p.name[:3] for p in m.pods] == ["rs-"]
    assert re.fullmatch(f"rs-{A}{{5}}", m.pods[0].name)
    assert owner(m.pods[0])[:2] == ("ReplicaSet", "rs")
    assert m.workload_summary() == [("ReplicaSet default/rs", ""), ("ReplicaSet default/none", "")]


def test_statefulset_pods_are_ordered_with_kubes_labels_and_claims():
    claim = {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                                    "resources": {"requests": {"storage": "1Gi"}}}}
    m = load_objects([workload("StatefulSet", "db", "shop", replicas=3, serviceName="db",
                               volumeClaimTemplates=[claim])])
    assert [p.name for p in m.pods] == ["db-0", "db-1", "db-2"]
    for i, p in enumerate(m.pods):
        assert p.labels["statefulset.kubernetes.io/pod-name"] == f"db-{i}"
        assert p.labels["apps.kubernetes.io/pod-index"] == str(i)
        assert p.labels["controller-revision-hash"].startswith("db-")
        assert owner(p)[:2] == ("StatefulSet", "db")
        assert p.raw["spec"]["hostname"] == f"db-{i}" and p.raw["spec"]["subdomain"] == "db"
        assert p.claim_names == (f"data-db-{i}",)
    assert sorted(o["metadata"]["name"] for k, o in m.objects if k == "PersistentVolumeClaim") == [
        "data-db-0", "data-db-1", "data-db-2"]


@pytest.mark.parametrize(("parallelism", "completions", "pods", "noted"),
                         [(None, None, 1, False), (3, None, 3, False), (2, 5, 2, True), (4, 2, 2, False), (0, 3, 0, True)])
def test_job_creates_the_pods_it_runs_at_once(parallelism, completions, pods, noted):
    spec = {k: v for k, v in (("parallelism", parallelism), ("completions", completions)) if v is not None}
    m = load_objects([workload("Job", "etl", "batch", **spec)])
    assert len(m.pods) == pods
    for p in m.pods:
        assert re.fullmatch(f"etl-{A}{{5}}", p.name)
        assert owner(p)[:2] == ("Job", "etl")
        assert p.labels["job-name"] == p.labels["batch.kubernetes.io/job-name"] == "etl"
        assert p.labels["controller-uid"] == owner(p)[2]
    note = m.notes["Job batch/etl"]
    assert ("never finish" in note) == noted


def test_indexed_job_and_suspended_job():
    m = load_objects([workload("Job", "ix", completionMode="Indexed", completions=3, parallelism=3),
                      workload("Job", "off", suspend=True)])
    ix = [p for p in m.pods if p.controller.name == "ix"]
    assert [p.annotations["batch.kubernetes.io/job-completion-index"] for p in ix] == ["0", "1", "2"]
    assert all(re.fullmatch(f"ix-{i}-{A}{{5}}", p.name) for i, p in enumerate(ix))
    assert not [p for p in m.pods if p.controller.name == "off"] and "suspended" in m.notes["Job default/off"]


def test_cronjob_creates_one_job_named_after_its_scheduled_minute():
    created = "2026-11-20T10:07:00Z"
    cj = {"apiVersion": "batch/v1", "kind": "CronJob",
          "metadata": {"name": "report", "namespace": "batch", "creationTimestamp": created},
          "spec": {"schedule": "*/15 * * * *", "jobTemplate": {
              "metadata": {"labels": {"kind": "report"}},
              "spec": {"parallelism": 2, "template": template(restartPolicy="OnFailure")}}}}
    m = load_objects([cj])
    at = calendar.timegm((2026, 11, 20, 10, 15, 0))
    job_name = f"report-{at // 60}"
    jobs = [o for k, o in m.objects if k == "Job"]
    assert [j["metadata"]["name"] for j in jobs] == [job_name]
    assert jobs[0]["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
    assert jobs[0]["metadata"]["labels"] == {"kind": "report"}
    assert len(m.pods) == 2
    for p in m.pods:
        assert re.fullmatch(f"{job_name}-{A}{{5}}", p.name) and owner(p)[:2] == ("Job", job_name)
        assert m.owners[p.key] == "CronJob batch/report"


def test_cron_schedules():
    t0 = calendar.timegm((2026, 11, 20, 10, 7, 30))  # a Friday
    assert next_schedule("*/15 * * * *", t0) == calendar.timegm((2026, 11, 20, 10, 15, 0))
    assert next_schedule("@daily", t0) == calendar.timegm((2026, 11, 21, 0, 0, 0))
    assert next_schedule("0 9 * * mon", t0) == calendar.timegm((2026, 11, 23, 9, 0, 0))
    assert next_schedule("30 4 1 jan *", t0) == calendar.timegm((2027, 1, 1, 4, 30, 0))
    assert next_schedule("0 0 30 2 *", t0) is None
    for bad in ("* * *", "61 * * * *", "*/0 * * * *", "x * * * *"):
        with pytest.raises(ValueError):
            next_schedule(bad, t0)


# -- DaemonSets ------------------------------------------------------------------------------------------

def test_daemonset_tolerations_are_kubes():
    tols = daemon_tolerations({"tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                                "effect": "NoExecute"}]})
    assert [(t["key"], t["effect"]) for t in tols] == [
        ("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"), ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"), ("node.kubernetes.io/unschedulable", "NoSchedule")]
    assert ("node.kubernetes.io/network-unavailable", "NoSchedule") in [
        (t["key"], t["effect"]) for t in daemon_tolerations({"hostNetwork": True})]


def test_daemonset_runs_on_the_nodes_its_selector_affinity_and_tolerations_admit():
    nodes = [node("ssd-1", {"disk": "ssd", "zone": "a"}), node("ssd-2", {"disk": "ssd", "zone": "b"}),
             node("hdd", {"disk": "hdd", "zone": "a"}),
             node("pressured", {"disk": "ssd", "zone": "a"},
                  [{"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"},
                   {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
                   {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
             node("gpu", {"disk": "ssd", "zone": "a"}, [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
             node("soft", {"disk": "ssd", "zone": "a"}, [{"key": "x", "effect": "PreferNoSchedule"}])]
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    ds = [workload("DaemonSet", "all"),
          workload("DaemonSet", "ssd", template=template(nodeSelector={"disk": "ssd"})),
          workload("DaemonSet", "zone-a", template=template(affinity=aff)),
          workload("DaemonSet", "gpu", template=template(tolerations=[{"key": "gpu", "operator": "Equal",
                                                                       "value": "true", "effect": "NoSchedule"}]))]
    m = load_objects([*nodes, *ds])

    def placed(name):
        out = []
        for p in m.pods:
            if p.controller.name == name:
                terms = p.affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": terms[0][
                    "matchFields"][0]["values"]}]}]
                out.append(terms[0]["matchFields"][0]["values"][0])
                assert re.fullmatch(f"{name}-{A}{{5}}", p.name) and owner(p)[:2] == ("DaemonSet", name)
                assert p.node_name is None  # scheduled by the scheduler, as kube >= 1.12
        return sorted(out)

    assert placed("all") == ["hdd", "pressured", "soft", "ssd-1", "ssd-2"]
    assert placed("ssd") == ["pressured", "soft", "ssd-1", "ssd-2"]
    assert placed("zone-a") == ["hdd", "pressured", "soft", "ssd-1"]
    assert placed("gpu") == ["gpu", "hdd", "pressured", "soft", "ssd-1", "ssd-2"]
    assert "5 of 6 nodes admit it (excluded by taint gpu=true:NoSchedule)" == m.notes["DaemonSet default/all"]


def test_daemonset_pods_are_bound_to_their_nodes_by_the_scheduler(tmp_path, capsys):
    docs = [node("a"), node("b"), node("c", taints=[{"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}]),
            workload("DaemonSet", "agent", "kube-system")]
    rc, out, _ = simulate(tmp_path, docs, capsys)
    assert rc == 0
    assert sorted(p["node"] for p in out["pods"]) == ["a", "b", "c"]
    assert out["workloads"] == [{"kind": "DaemonSet", "namespace": "kube-system", "name": "agent", "pods": 3,
                                 "bound": 3, "pending": 0, "rejected": 0, "reasons": {},
                                 "note": "3 of 3 nodes admit it"}]


def test_pods_the_input_already_has_are_adopted():
    rs = workload("ReplicaSet", "rs", replicas=3)
    existing = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "rs-abcde", "namespace": "default", "labels": {"app": "x"},
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                                  "uid": "u", "controller": True}]},
                "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}}
    m = load_objects([node("n1"), existing, rs])
    assert len([p for p in m.pods if p.controller and p.controller.name == "rs"]) == 3
    assert m.owners["default/rs-abcde"] == "ReplicaSet default/rs"


# -- through simulate ------------------------------------------------------------------------------------

PROFILE = {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
           "metadata": {"name": "batch"},
           "spec": {"namespaceSelector": {"matchLabels": {"colocation": "on"}}, "qosClass": "BE",
                    "priorityClassName": "koord-batch", "labels": {"koordinator.sh/mutated": "true"}}}
BATCH_NODES = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"},
                "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110",
                                           "kubernetes.io/batch-cpu": "6000",
                                           "kubernetes.io/batch-memory": "24Gi"}}} for i in range(2)]


def test_a_colocation_profile_turns_a_deployments_pods_into_be_pods_as_bare_pods(tmp_path, capsys):
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "spark", "labels": {"colocation": "on"}}}
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "koord-batch"},
          "value": 5500}
    tmpl = template(cpu="2")
    tmpl["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "2", "memory": "1Gi"}
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": "spark", **tmpl["metadata"]},
            "spec": tmpl["spec"]}
    deploy = workload("Deployment", "exec", "spark", replicas=2, template=tmpl)
    rc, out, _ = simulate(tmp_path, [*BATCH_NODES, ns, pc, PROFILE, bare, deploy], capsys)
    assert rc == 0
    pods = out["pods"]
    assert len(pods) == 3 and all(p["phase"] == "Bound" for p in pods)
    want = {k: pods[0][k] for k in ("priorityClassName", "priority", "containers")}
    assert want["priorityClassName"] == "koord-batch" and want["priority"] == 5500
    assert want["containers"][0]["requests"] == {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "1Gi"}
    for p in pods[1:]:
        assert {k: p[k] for k in want} == want
        assert p["labels"]["koordinator.sh/qosClass"] == "BE" and p["labels"]["koordinator.sh/mutated"] == "true"
        assert p["labels"]["app"] == "x" and "pod-template-hash" in p["labels"]
    assert out["workloads"][0]["bound"] == 2 and out["workloads"][0]["pods"] == 2
    assert out["summary"]["bound"] == 3


def test_pending_pods_are_grouped_by_owner_with_reasons(tmp_path, capsys):
    docs = [node("small", cpu="2"), workload("Deployment", "big", replicas=3, template=template(cpu="1500m")),
            workload("StatefulSet", "none", replicas=0)]
    rc, out, _ = simulate(tmp_path, docs, capsys)
    assert rc == 0
    big, none = out["workloads"]
    assert (big["kind"], big["name"], big["pods"], big["bound"], big["pending"]) == ("Deployment", "big", 3, 1, 2)
    assert list(big["reasons"].values()) == [2] and "Insufficient cpu" in next(iter(big["reasons"]))
    assert (none["pods"], none["bound"]) == (0, 0)
    assert main(["simulate", str(tmp_path / "in.yaml")]) == 0
    table = capsys.readouterr().out
    assert "workloads" in table and "1 of 3" in table and "Deployment default/big" in table


def test_kinds_simulate_does_not_model_are_named_in_one_warning(tmp_path, capsys):
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"selector": {"app": "x"}}}
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"}}
    foo = [{"apiVersion": "apps/v1", "kind": "Foo", "metadata": {"name": f"f{i}"}} for i in range(2)]
    rc, out, err = simulate(tmp_path, [node("n1"), svc, hpa, *foo, workload("Deployment", "web")], capsys)
    assert rc == 0 and out["summary"]["bound"] == 1
    lines = [x for x in err.splitlines() if "warning" in x]
    assert len(lines) == 1
    assert "Foo (2)" in lines[0] and "HorizontalPodAutoscaler (1)" in lines[0]
    assert "Service" not in lines[0] and "Deployment" not in lines[0] and "ReplicaSet" not in lines[0]


@pytest.mark.parametrize(("doc", "where"), [
    (workload("Deployment", "web", replicas="three"), "Deployment default/web: field spec.replicas: expected an integer"),
    (workload("Deployment", "web", replicas=True), "Deployment default/web: field spec.replicas"),
    (workload("ReplicaSet", "web", replicas=-1), "ReplicaSet default/web: field spec.replicas: -1: must be greater"),
    ({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
      "spec": {"selector": {"matchLabels": {"app": "x"}}}}, "Deployment default/web: field spec.template: Required"),
    ({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"}},
     "StatefulSet default/db: field spec: Required"),
    (workload("Deployment", "web", template=template(cpu="lots")),
     "Deployment default/web: field spec.template.spec.containers[0].resources.requests.cpu"),
    (workload("DaemonSet", "d", template={"metadata": {"labels": {"app": "x"}}, "spec": {"containers": "c"}}),
     "DaemonSet default/d: field spec.template.spec.containers: expected a list"),
    (workload("Deployment", "web", selector={"matchLabels": {"app": "y"}}),
     "Deployment default/web: field spec.template.metadata.labels: Invalid value: `selector` does not match"),
    ({**workload("Deployment", "web"), "spec": {"template": template()}}, "Deployment default/web: field spec.selector"),
    (workload("Job", "j", template=template()), "Job default/j: field spec.template.spec.restartPolicy: Unsupported"),
    (workload("Job", "j", parallelism=1.5), "Job default/j: field spec.parallelism: expected an integer"),
    ({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
      "spec": {"schedule": "every day", "jobTemplate": {"spec": {"template": template(restartPolicy="Never")}}}},
     "CronJob default/c: field spec.schedule: invalid schedule"),
    ({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
      "spec": {"schedule": "@hourly", "jobTemplate": {"spec": {"template": template(cpu="-1")}}}},
     "CronJob default/c: field spec.jobTemplate.spec.template.spec"),
])
def test_malformed_workloads_exit_2_naming_file_object_and_field(tmp_path, capsys, doc, where):
    rc, err, _ = simulate(tmp_path, [node("n1"), doc], capsys)
    assert rc == 2
    assert "in.yaml" in err and where in err, err
    assert len(err.strip().splitlines()) == 1


def test_malformed_workload_error_from_the_api():
    with pytest.raises(ManifestError) as e:
        load_objects([workload("Deployment", "web", template=template(cpu="lots"))], file="w.yaml")
    assert (e.value.file, e.value.obj, e.value.field) == (
        "w.yaml", "Deployment default/web", "spec.template.spec.containers[0].resources.requests.cpu")


def test_the_workloads_example_folder_previews(capsys):
    outs = []
    for _ in range(2):
        assert main(["simulate", str(EXAMPLES), "-o", "json", "--seed", "1"]) == 0
        captured = capsys.readouterr()
        assert "warning" not in captured.err
        outs.append(json.loads(captured.out))
    a, b = outs
    assert [(p["name"], p["node"]) for p in a["pods"]] == [(p["name"], p["node"]) for p in b["pods"]]
    rows = {f"{r['kind']} {r['namespace']}/{r['name']}": r for r in a["workloads"]}
    counts = {k: (r["bound"], r["pods"]) for k, r in rows.items()}
    assert counts == {"Deployment shop/web": (4, 4), "Deployment shop/cache": (0, 2), "StatefulSet shop/db": (3, 3),
                      "Job batch/etl": (3, 3), "CronJob batch/report": (1, 1),
                      "DaemonSet monitoring/node-exporter": (3, 3), "DaemonSet logging/fluentd": (4, 4),
                      "DaemonSet monitoring/ssd-monitor": (2, 2)}
    assert "untolerated taint" in next(iter(rows["Deployment shop/cache"]["reasons"]))
    assert "3 of 6 completions" in rows["Job batch/etl"]["note"]
    names = {p["name"] for p in a["pods"]}
    assert {"db-0", "db-1", "db-2"} <= names
    exporter = [p for p in a["pods"] if p["name"].startswith("node-exporter-")]
    assert sorted(p["node"] for p in exporter) == ["worker-1", "worker-2", "worker-3"]
    assert a["summary"]["bound"] == 20 and a["summary"]["pending"] == 2


def test_replicas_beyond_what_a_cluster_holds_are_refused_not_created(tmp_path, capsys):
    rc, err, _ = simulate(tmp_path, [node("n1"), workload("Deployment", "web", replicas=2**31 - 1)], capsys)
    assert rc == 2 and "Deployment default/web: field spec.replicas: the input's workloads would create more" in err
    rc, err, _ = simulate(tmp_path, [node("n1"), *(workload("ReplicaSet", f"r{i}", replicas=100_000) for i in range(2))],
                          capsys)
    assert rc == 2 and "ReplicaSet default/r1: field spec.replicas" in err


def test_a_deployment_whose_replicaset_is_in_the_input_leaves_the_pods_to_it():
    rs = workload("ReplicaSet", "web-5d8f7b9c4", replicas=2)
    rs["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d",
                                          "controller": True}]
    m = load_objects([workload("Deployment", "web", replicas=2), rs])
    assert [k for k, _ in m.objects].count("ReplicaSet") == 1
    assert len(m.pods) == 2 and all(p.controller.name == "web-5d8f7b9c4" for p in m.pods)
    assert {m.owners[p.key] for p in m.pods} == {"Deployment default/web"}
    assert m.notes["Deployment default/web"] == "its ReplicaSet is in the input"


def test_an_ordered_statefulset_with_a_pending_pod_says_the_later_ones_would_wait(tmp_path, capsys):
    docs = [node("small", cpu="3"), workload("StatefulSet", "db", replicas=3, template=template(cpu="2")),
            workload("StatefulSet", "par", replicas=1, podManagementPolicy="Parallel", template=template(cpu="2"))]
    rc, out, _ = simulate(tmp_path, docs, capsys)
    assert rc == 0
    db, par = out["workloads"]
    assert (db["bound"], db["pending"]) == (1, 2) and db["note"].startswith("OrderedReady: the pods after db-1")
    assert par["pending"] == 1 and par["note"] == ""


def test_the_python_api_reports_workloads_as_the_cli_does():
    from koordfw import simulate as simulate_api

    data = simulate_api(load_objects([node("n1"), workload("ReplicaSet", "rs", replicas=2)]), autoload=False).to_dict()
    assert [(r["kind"], r["name"], r["bound"], r["pods"]) for r in data["workloads"]] == [("ReplicaSet", "rs", 2, 2)]


@pytest.mark.parametrize(("spec", "where"), [
    ({"volumeClaimTemplates": {"a": 1}}, "field spec.volumeClaimTemplates: expected a list"),
    ({"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteSometimes"]}}]},
     "field spec.volumeClaimTemplates[0].spec.accessModes"),
    ({"selector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}}, "StatefulSet default/db: field spec.selector"),
])
def test_malformed_statefulset_claims_and_selectors(tmp_path, capsys, spec, where):
    rc, err, _ = simulate(tmp_path, [workload("StatefulSet", "db", **spec)], capsys)
    assert rc == 2 and "in.yaml" in err and where in err, err


@pytest.mark.parametrize(("doc", "where"), [
    (workload("Job", "j", template={"metadata": {"labels": ["a"]}, "spec": {"restartPolicy": "Never"}}),
     "Job default/j: field spec.template.metadata.labels: expected a mapping"),
    ({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
      "spec": {"schedule": "@hourly", "jobTemplate": {"metadata": "x", "spec": {"template": template()}}}},
     "CronJob default/c: field spec.jobTemplate.metadata: expected a mapping"),
    (workload("StatefulSet", "s", volumeClaimTemplates=[{"metadata": {"name": "d", "labels": "x"}}]),
     "StatefulSet default/s: field spec.volumeClaimTemplates[0].metadata.labels"),
    (workload("DaemonSet", "d", template={"metadata": {"labels": {"app": "x"}}, "spec": ["c"]}),
     "DaemonSet default/d: field spec.template.spec: expected a mapping"),
])
def test_odd_shapes_in_workloads_are_errors_not_crashes(tmp_path, capsys, doc, where):
    rc, err, _ = simulate(tmp_path, [node("n1"), doc], capsys)
    assert rc == 2 and where in err, err
