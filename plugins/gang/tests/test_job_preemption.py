"""Job-level preemption (issue 34 point 2) through the embedded engine: a gang preempts as one job (all of
its members placed in a dry run, or nothing evicted), chooses nodes by Koordinator's cost, honours PDBs,
``disable-preemptible``, quota ``preemptible=false`` and the quota rule, holds the room by nominating every
member, and (``evictWholeStrictGangs``) evicts Strict victim gangs whole. Pods without a gang keep
pod-level preemption."""

from __future__ import annotations

from gang_testkit import cluster, gang_ann, pod

from koordfw.testing import schedule

PROFILE = {"plugins": {"postFilter": {"enabled": ["gang", "default_preemption"]}},
           "pluginConfig": {"gang": {"enablePreemption": True}}}
HIGH, LOW = 1000, 1
QUESTIONED = "scheduling.koordinator.sh/questioned-object-key"


def profile(**gang_args) -> dict:
    return {**PROFILE, "pluginConfig": {"gang": {"enablePreemption": True, **gang_args}}}


def run(nodes: int | list[tuple[str, str]], objs: list[dict], *, prof: dict | None = PROFILE, only=("gang",)):
    b = cluster(nodes, "32", *objs) if isinstance(nodes, int) else cluster(0, "32", *objs)
    if not isinstance(nodes, int):
        for name, cpu in nodes:
            b.node(name, cpu=cpu)
    r = schedule(b, only=list(only), profile=prof)
    d = r.to_dict()
    return {p["name"]: p for p in d["pods"]}, d


def bound(pods: dict) -> dict[str, str]:
    return {n: p["node"] for n, p in pods.items() if p["phase"] == "Bound"}


def evicted(pods: dict) -> list[str]:
    return sorted(n for n, p in pods.items() if p["reason"].startswith("preempted by"))


def member(name: str, gang: str, n: int, *, cpu: str = "16", t: float = 10, **extra: str) -> dict:
    return pod(name, cpu=cpu, t=t, priority=HIGH, annotations=gang_ann(gang, n, **extra))


def test_koordinator_preempt_success_end_to_end():
    """The "preempt success" case of Koordinator's table, through the scheduler: both members go to
    node n0 (cost tie, first by name), its two pods are the victims, n1's pods keep running."""
    objs = [pod(f"existing-pod-{i}", cpu="16", node=f"n{(i - 1) // 2}", priority=LOW) for i in (1, 2, 3, 4)]
    objs += [member("pending-pod-1", "gangA", 2, t=11), member("pending-pod-2", "gangA", 2, t=12)]
    pods, d = run(2, objs)
    assert bound(pods) == {"existing-pod-3": "n1", "existing-pod-4": "n1", "pending-pod-1": "n0",
                           "pending-pod-2": "n0"}
    assert evicted(pods) == ["existing-pod-1", "existing-pod-2"]
    [row] = d["jobPreemptions"]
    assert row["reason"] == "preempt success"
    assert row["message"] == "preempt success, alreadyWaitingForBound: 0/2"
    assert row["nominations"] == {"default/pending-pod-1": "n0", "default/pending-pod-2": "n0"}
    assert row["victims"] == ["default/existing-pod-1", "default/existing-pod-2"]


def test_waiting_member_is_nominated_where_it_waited():
    """Koordinator's "preempt success with one waiting pod", end to end: pending-pod-2 (older) waits at
    Permit on node-2; pending-pod-1 fits nowhere; preemption evicts only existing-pod-2 on node-1, rejects
    the waiting member and nominates it back to node-2; both then bind."""
    objs = [pod("existing-pod-1", cpu="16", node="node-1", priority=LOW),
            pod("existing-pod-2", cpu="16", node="node-1", priority=LOW),
            pod("existing-pod-4", cpu="16", node="node-2", priority=LOW),
            member("pending-pod-2", "gangA", 2, t=10, waiting_time="30s"),
            member("pending-pod-1", "gangA", 2, t=11, waiting_time="30s")]
    pods, d = run([("node-1", "32"), ("node-2", "32")], objs)
    assert evicted(pods) == ["existing-pod-2"]
    assert bound(pods) == {"existing-pod-1": "node-1", "existing-pod-4": "node-2", "pending-pod-1": "node-1",
                           "pending-pod-2": "node-2"}
    [row] = d["jobPreemptions"]
    assert row["message"] == "preempt success, alreadyWaitingForBound: 1/2"
    assert row["trigger"] == "default/pending-pod-1"


def _three_big_members() -> list[dict]:
    # 2 nodes × 32 CPU, each running two 16-CPU pods of low priority; a Strict gang of three 24-CPU
    # members: one node holds one member at most, so no preemption can place the whole gang
    objs = [pod(f"low-{i}", cpu="16", node=f"n{i // 2}", priority=LOW) for i in range(4)]
    return objs + [member(f"big-{i}", "big", 3, cpu="24", t=10 + i) for i in range(3)]


def test_not_helpful_evicts_nothing():
    pods, d = run(2, _three_big_members())
    assert evicted(pods) == []
    assert sorted(bound(pods)) == ["low-0", "low-1", "low-2", "low-3"]
    rows = d["jobPreemptions"]
    assert rows and all(r["reason"] == "preemption not helpful" for r in rows)
    assert rows[0]["message"] == "0/2 nodes are available: 2 Insufficient cpu."
    gang = next(g for g in d["gangs"] if g["gang"] == "default/big")
    assert gang["bound"] == 0 and gang["waiting"] == 0


def test_pod_level_preemption_baseline_evicts_for_nothing():
    """The same cluster without enablePreemption: kube's pod-level preemption evicts victims for members
    of a gang that can never be placed whole (the failure mode job-level preemption removes)."""
    pods, _ = run(2, _three_big_members(), prof=None)
    assert evicted(pods)
    assert not any(n.startswith("big") for n in bound(pods))


def test_cost_prefers_the_node_whose_victims_belong_to_fewer_jobs():
    """Koordinator's estimatePreemptionCost: n0's two victims are two jobs (cost 2 × rank of priority 5),
    n1's two victims one job (cost 1 × rank): n1 wins, though n0 comes first by name."""
    objs = [pod("y", cpu="16", node="n0", priority=5, labels={QUESTIONED: "Y"}),
            pod("z", cpu="16", node="n0", priority=5, labels={QUESTIONED: "Z"}),
            pod("x-0", cpu="16", node="n1", priority=5, labels={QUESTIONED: "X"}),
            pod("x-1", cpu="16", node="n1", priority=5, labels={QUESTIONED: "X"}),
            pod("w", cpu="4", node="n2", priority=1),
            member("p-0", "p", 1, cpu="32")]
    pods, _ = run([("n0", "32"), ("n1", "32"), ("n2", "8")], objs)
    assert evicted(pods) == ["x-0", "x-1"]
    assert bound(pods)["p-0"] == "n1"


def test_pdb_protected_victims_are_avoided():
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "guard", "namespace": "default"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
           "status": {"disruptionsAllowed": 0}}
    objs = [pod("a", cpu="32", node="n0", priority=LOW, labels={"app": "guarded"}),
            pod("b", cpu="32", node="n1", priority=LOW), member("p-0", "p", 1, cpu="32")]
    pods, _ = run(2, objs)
    assert evicted(pods) == ["a"]  # without the PDB, n0 (first by name) is chosen
    pods, d = run(2, [*objs, pdb])
    assert evicted(pods) == ["b"]
    assert bound(pods)["p-0"] == "n1"
    assert d["jobPreemptions"][0]["pdbViolations"] == 0


def test_non_preemptible_pods_are_never_victims():
    objs = [pod("a", cpu="32", node="n0", priority=LOW, labels={"scheduling.koordinator.sh/disable-preemptible": "true"}),
            pod("b", cpu="32", node="n1", priority=LOW, labels={"quota.scheduling.koordinator.sh/preemptible": "false"}),
            pod("c", cpu="32", node="n2", priority=LOW), member("p-0", "p", 1, cpu="32")]
    pods, _ = run(3, objs)
    assert evicted(pods) == ["c"]
    assert bound(pods)["p-0"] == "n2"


def test_pod_without_a_gang_keeps_pod_level_preemption():
    objs = [pod("low", cpu="32", node="n0", priority=LOW), pod("solo", cpu="32", t=5, priority=HIGH)]
    pods, d = run(1, objs)
    assert evicted(pods) == ["low"]
    assert bound(pods) == {"solo": "n0"}
    assert "jobPreemptions" not in d


def _victim_strict_gang() -> list[dict]:
    # Strict gang V (2 × 16 CPU) spread over n0 and n1, each node also running a plain 16-CPU pod; the
    # preemptor needs a whole node: n0 (first by name) is chosen, so v-0 and x are the victims
    return [pod("v-0", cpu="16", node="n0", priority=LOW, annotations=gang_ann("V", 2)),
            pod("x", cpu="16", node="n0", priority=LOW),
            pod("v-1", cpu="16", node="n1", priority=LOW, annotations=gang_ann("V", 2)),
            pod("y", cpu="16", node="n1", priority=LOW),
            member("p-0", "p", 1, cpu="32", t=100)]


def test_pod_level_choice_leaves_a_strict_gang_broken_and_reports_it():
    pods, d = run(2, _victim_strict_gang())
    assert evicted(pods) == ["v-0", "x"]
    assert bound(pods)["v-1"] == "n1"  # running, broken
    row = d["jobPreemptions"][0]
    assert row["choice"] == "podLevel"
    assert row["waste"]["podLevel"]["membersLeftBroken"] == 1
    assert row["waste"]["podLevel"]["brokenGangs"] == ["default/V"]
    assert row["waste"]["wholeGang"]["evicted"] == 3
    assert row["waste"]["podLevel"]["wastedMemberSeconds"] == row["waste"]["wholeGang"]["wastedMemberSeconds"] > 0
    assert next(g for g in d["gangs"] if g["gang"] == "default/V")["phase"] == "PartlyBound"


def test_evict_whole_strict_gangs():
    pods, d = run(2, _victim_strict_gang(), prof=profile(evictWholeStrictGangs=True))
    assert d["jobPreemptions"][0]["victims"] == ["default/v-0", "default/v-1", "default/x"]
    # V is pending whole (one node's free half cannot hold it); x, a plain pod, took the room v-1 left
    assert evicted(pods) == ["v-0", "v-1"]
    assert bound(pods) == {"p-0": "n0", "x": "n1", "y": "n1"}
    assert d["jobPreemptions"][0]["choice"] == "wholeGang"
    assert next(g for g in d["gangs"] if g["gang"] == "default/V")["phase"] != "PartlyBound"


def test_whole_strict_gangs_or_none():
    """A Strict gang one of whose members may not be evicted (here: of the preemptor's priority) is not a
    victim at all under evictWholeStrictGangs: the other node is used."""
    objs = [pod("v-0", cpu="32", node="n0", priority=LOW, annotations=gang_ann("V", 2)),
            pod("v-1", cpu="16", node="n2", priority=HIGH, annotations=gang_ann("V", 2)),
            pod("y", cpu="32", node="n1", priority=LOW), member("p-0", "p", 1, cpu="32", t=100)]
    pods, _ = run(3, objs, prof=profile(evictWholeStrictGangs=True))
    assert evicted(pods) == ["y"]
    pods, _ = run(3, objs)
    assert evicted(pods) == ["v-0"]


def _quota(name: str) -> dict:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": "quotas", "labels": {}, "annotations": {}},
            "spec": {"min": {"cpu": "48"}, "max": {"cpu": "96"}}}


def test_quota_rule_victims_of_the_preemptors_quota_only():
    """With the elastic_quota plugin and ElasticQuota objects, a job evicts only pods of its own quota
    (elastic_quota's own preemption rule): n0's pod is in quota qb, so n1's (qa) is the victim."""
    qn = "quota.scheduling.koordinator.sh/name"
    objs = [_quota("qa"), _quota("qb"),
            pod("b-low", cpu="32", node="n0", priority=LOW, labels={qn: "qb"}),
            pod("a-low", cpu="32", node="n1", priority=LOW, labels={qn: "qa"}),
            pod("p-0", cpu="32", t=10, priority=HIGH, labels={qn: "qa"}, annotations=gang_ann("p", 1))]
    pods, _ = run(2, objs, only=("gang", "elastic_quota"))
    assert evicted(pods) == ["a-low"]
    assert bound(pods)["p-0"] == "n1"
    pods, _ = run(2, objs)  # without the elastic_quota plugin no quota rule applies: n0 first by name
    assert evicted(pods) == ["b-low"]


def _group(n_nodes: int) -> list[dict]:
    groups = '["default/ga","default/gb"]'
    objs = [pod(f"low-{i}", cpu="32", node=f"n{i}", priority=LOW) for i in range(n_nodes)]
    return objs + [member("ga-0", "ga", 1, cpu="32", t=10, groups=groups),
                   member("gb-0", "gb", 2, cpu="32", t=11, groups=groups),
                   member("gb-1", "gb", 2, cpu="32", t=12, groups=groups)]


def test_gang_group_preempts_as_one_job():
    pods, d = run(3, _group(3))
    assert evicted(pods) == ["low-0", "low-1", "low-2"]
    assert sorted(n for n in bound(pods) if not n.startswith("low")) == ["ga-0", "gb-0", "gb-1"]
    [row] = d["jobPreemptions"]
    assert row["job"] == "default/ga,default/gb"
    assert sorted(row["nominations"]) == ["default/ga-0", "default/gb-0", "default/gb-1"]


def test_gang_group_not_helpful_when_one_gang_cannot_be_placed():
    # two nodes for three 32-CPU members: gang ga alone would fit, the group does not; nothing is evicted
    pods, d = run(2, _group(2))
    assert evicted(pods) == []
    assert sorted(bound(pods)) == ["low-0", "low-1"]
    assert {r["reason"] for r in d["jobPreemptions"]} == {"preemption not helpful"}


def test_the_example_through_koordfw_simulate(capsys):
    """``koordfw simulate --profile examples/gang-preemption-profile.yaml examples/gang-preemption``: the
    worked example of docs/plugins/gang.md."""
    import json
    from pathlib import Path

    from koordfw.cli import main

    root = Path(__file__).resolve().parents[3]
    assert main(["simulate", "--profile", str(root / "examples" / "gang-preemption-profile.yaml"),
                 str(root / "examples" / "gang-preemption"), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    pods = {p["name"]: p for p in out["pods"]}
    assert bound(pods) == {"batch-1": "node-1", "batch-2": "node-1", "log-agent": "node-3",
                           "train-0": "node-2", "train-1": "node-2"}
    assert evicted(pods) == ["batch-3", "batch-4"]
    train, sweep = out["jobPreemptions"]
    assert train["job"] == "ai/train" and train["victims"] == ["ai/batch-3", "ai/batch-4"]
    assert sweep == {"job": "ai/sweep", "trigger": "ai/sweep-0", "time": sweep["time"],
                     "reason": "preemption not helpful", "message": "0/3 nodes are available: 3 Insufficient cpu."}


def test_dry_run_releases_the_victims_quota_usage():
    """Issue 34's leftover: the dry run tells elastic_quota (its pre_filter extensions) that the victims are
    gone and the members already placed are there. Quota qa (max 5 CPU) uses 4 (a-low-1/2 on n0); the job
    asks 1 + 3. The trigger p-0 passes the quota (4 + 1) but fits no node; p-1's own check (4 + 3 > 5) fails
    unless the victims' usage is released (0 + p-0's 1 + 3 <= 5): before, the job was "not helpful". n1's
    pod is in quota qb, never a victim."""
    qn = "quota.scheduling.koordinator.sh/name"

    def quota(name: str, mx: str) -> dict:
        q = _quota(name)
        q["spec"] = {"min": {"cpu": "1"}, "max": {"cpu": mx}}
        return q

    objs = [quota("qa", "5"), quota("qb", "64"),
            pod("a-low-1", cpu="2", node="n0", priority=LOW, labels={qn: "qa"}),
            pod("a-low-2", cpu="2", node="n0", priority=LOW, labels={qn: "qa"}),
            pod("b-big", cpu="4", node="n1", priority=LOW, labels={qn: "qb"}),
            pod("p-0", cpu="1", t=10, priority=HIGH, labels={qn: "qa"}, annotations=gang_ann("p", 2)),
            pod("p-1", cpu="3", t=11, priority=HIGH, labels={qn: "qa"}, annotations=gang_ann("p", 2))]
    # gang's post_filter before elastic_quota's (its own pod-level preemption would act for p-0 alone)
    prof = {"plugins": {"postFilter": {"enabled": ["gang", "elastic_quota", "default_preemption"]}},
            "pluginConfig": {"gang": {"enablePreemption": True}, "elastic_quota": {"enableRuntimeQuota": False}}}
    pods, d = run([("n0", "4"), ("n1", "4")], objs, prof=prof, only=("gang", "elastic_quota"))
    assert evicted(pods) == ["a-low-1", "a-low-2"]
    assert bound(pods) == {"b-big": "n1", "p-0": "n0", "p-1": "n0"}
    row = next(r for r in d["jobPreemptions"] if r["reason"] == "preempt success")
    assert row["nominations"] == {"default/p-0": "n0", "default/p-1": "n0"}
    used = {q["name"]: q["used"] for q in d["quotas"]}
    assert used["qa"] == {"cpu": "4"}  # the job's 1 + 3, within max 5
