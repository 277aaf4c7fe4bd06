"""``koordfw simulate``'s terminal output and exit status (issue 32 points 4, 6, 7, 8): human units in every
table (cores, binary units) while JSON keeps machine units; tables fit 100 columns with whole headers;
``--fail-on-pending``; ``schedulerName`` honoured as live with ``--all-schedulers``; ``--now``; the
batch-cpu milli-cores warning."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from koordfw.cli import main

ROOT = Path(__file__).resolve().parents[1]
COLOCATION = str(ROOT / "examples" / "colocation")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["simulate", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_tables_use_human_units_and_fit_100_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    rc, out, _ = run(capsys, COLOCATION)
    assert rc == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "batch-cpu 8/13.7 cores" in out and "16Gi/64.2Gi" in out and "batch-cpu 20/35.4 cores" in out
    assert "30/31 cores (97%)" in out
    assert "memory=44.8Gi" in out and "cpu=12.8 cores" in out and "batch-cpu=40 cores" in out
    assert "68934225101" not in out and "13700" not in out
    # headers are never wrapped: every header row of batchResources names whole columns
    header_rows = [line for line in lines if line.startswith("┃")]
    headers = {cell.strip() for row in header_rows for cell in row.strip("┃").split("┃")}
    assert {"batch-cpu", "batch-memory", "margin", "hpMaxUsedReq", "onceSatisfied", "matchPolicy"} <= headers
    assert all(h and " " not in h or h in ("reason / plugin annotations", "other requested/allocatable")
               for h in headers if h)


def test_json_keeps_machine_units(capsys):
    rc, out, _ = run(capsys, COLOCATION, "-o", "json")
    assert rc == 0
    data = json.loads(out)
    node_a = next(n for n in data["nodes"] if n["name"] == "node-a")
    assert node_a["allocatable"]["kubernetes.io/batch-cpu"] == "13700"
    assert node_a["allocatable"]["kubernetes.io/batch-memory"] == "68934225101"


def test_fail_on_pending(capsys):
    assert run(capsys, COLOCATION)[0] == 0
    rc, _, err = run(capsys, COLOCATION, "--fail-on-pending")
    assert rc == 1 and "6 pod(s) pending" in err


NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0"},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110",
                                   "kubernetes.io/batch-cpu": "6000", "kubernetes.io/batch-memory": "24Gi"}}}


def pod(name: str, scheduler: str | None = None, requests: dict | None = None) -> dict:
    spec: dict = {"containers": [{"name": "main", "resources": {"requests": requests or {"cpu": "1"}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def write(tmp_path: Path, docs: list[dict]) -> str:
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    return str(f)


def test_pods_of_another_scheduler_are_left_alone_and_listed(tmp_path, capsys, monkeypatch):
    f = write(tmp_path, [NODE, pod("ours", "koordfw-scheduler"), pod("unset"), pod("theirs", "default-scheduler")])
    rc, out, _ = run(capsys, f, "-o", "json")
    data = json.loads(out)
    phases = {p["name"]: p["phase"] for p in data["pods"]}
    assert phases == {"ours": "Bound", "unset": "Bound", "theirs": "NotOurs"}
    theirs = next(p for p in data["pods"] if p["name"] == "theirs")
    assert "'default-scheduler'" in theirs["reason"] and "--all-schedulers" in theirs["reason"]
    assert data["summary"]["notOurs"] == 1 and data["summary"]["pending"] == 0
    rc, out, _ = run(capsys, f, "-o", "json", "--all-schedulers")
    assert {p["name"]: p["phase"] for p in json.loads(out)["pods"]}["theirs"] == "Bound"
    monkeypatch.setenv("COLUMNS", "100")
    rc, out, _ = run(capsys, f, "--fail-on-pending")
    assert rc == 0 and "not ours" in out and "bound 2, pending 0, not ours 1" in out


def test_the_profiles_scheduler_name_is_ours(tmp_path, capsys):
    prof = tmp_path / "p.yaml"
    prof.write_text("schedulerName: koord-scheduler\n")
    f = write(tmp_path, [NODE, pod("a", "koord-scheduler"), pod("b", "koordfw-scheduler")])
    rc, out, _ = run(capsys, f, "-o", "json", "--profile", str(prof))
    assert {p["name"]: p["phase"] for p in json.loads(out)["pods"]} == {"a": "Bound", "b": "NotOurs"}


def test_example_metrics_are_fresh_unless_now_is_given(capsys):
    rc, out, _ = run(capsys, COLOCATION, "-o", "json")
    assert "expired" not in out
    rc, out, _ = run(capsys, COLOCATION, "-o", "json", "--now", "2026-12-04T10:00:00Z")
    assert rc == 0 and "nodeMetric expired" in out
    rc_bad = None
    try:
        main(["simulate", COLOCATION, "--now", "yesterday"])
    except SystemExit as e:
        rc_bad = e.code
    assert rc_bad == 2 and "RFC 3339" in capsys.readouterr().err


def test_batch_cpu_below_100_milli_cores_warns_once_per_pod(tmp_path, capsys):
    small = pod("small", requests={"kubernetes.io/batch-cpu": "2", "kubernetes.io/batch-memory": "1Gi"})
    small["spec"]["containers"][0]["resources"]["limits"] = {"kubernetes.io/batch-cpu": "2"}
    mid = pod("mid", requests={"kubernetes.io/mid-cpu": "50"})
    fine = pod("fine", requests={"kubernetes.io/batch-cpu": "2k"})
    rc, _, err = run(capsys, write(tmp_path, [NODE, small, mid, fine]), "-o", "json")
    assert rc == 0
    lines = [line for line in err.splitlines() if "milli-cores" in line]
    assert len(lines) == 2, err
    assert "pod default/small" in lines[0] and "batch-cpu is in milli-cores: 2 means 0.002 cores; did you mean 2k?" in lines[0]
    assert "pod default/mid" in lines[1] and "mid-cpu is in milli-cores: 50 means 0.05 cores" in lines[1]


def test_refreshed_example_metrics_are_fresh_at_the_wall_clock(tmp_path, capsys):
    """docs/kubernetes.md: scripts/fresh-nodemetrics.py rewrites updateTime so a live scheduler (here:
    simulate with --now at that time) reads the example NodeMetrics as fresh."""
    import runpy
    import shutil

    folder = tmp_path / "cluster"
    shutil.copytree(COLOCATION, folder)
    now = "2027-01-05T12:00:00Z"
    script = runpy.run_path(str(ROOT / "scripts" / "fresh-nodemetrics.py"))
    assert script["main"]([str(folder / "20-nodemetrics.yaml"), "--now", now]) == 0
    refreshed = capsys.readouterr().out
    assert refreshed.count(f"updateTime: '{now}'") == 4
    (folder / "20-nodemetrics.yaml").write_text(refreshed)
    rc, out, _ = run(capsys, str(folder), "-o", "json", "--now", now)
    assert rc == 0 and "expired" not in out
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    assert "python3 scripts/fresh-nodemetrics.py --apply examples/colocation/20-nodemetrics.yaml" in docs


def test_pods_built_in_code_follow_the_same_rule():
    """Pods built in code (make_pod) follow the manifest rule: no schedulerName is ours, another name is not."""
    from koordfw.core.manifests import Manifests
    from koordfw.core.model import make_node, make_pod
    from koordfw.engines.embedded import simulate

    m = Manifests(nodes=[make_node("n0", allocatable={"cpu": "8", "memory": "16Gi", "pods": "110"})],
                  pods=[make_pod("mine", requests={"cpu": "1"}),
                        make_pod("theirs", requests={"cpu": "1"}, schedulerName="other")])
    assert {p["name"]: p["phase"] for p in simulate(m).to_dict()["pods"]} == {"mine": "Bound", "theirs": "NotOurs"}
    assert simulate(m, all_schedulers=True).placements() == {"default/mine": "n0", "default/theirs": "n0"}
