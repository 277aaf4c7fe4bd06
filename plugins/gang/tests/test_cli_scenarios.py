"""Scenario tests through ``koordfw simulate -o json`` (all installed plugins, default profile)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from gang_testkit import gang_pods

from koordfw.cli import main

ROOT = Path(__file__).resolve().parents[3]


def nodes(n: int, cpu: str) -> list[dict]:
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i:02d}"},
             "status": {"capacity": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
                        "allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"}}} for i in range(n)]


def simulate(tmp_path: Path, capsys, objects: list[dict]) -> dict:
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(objects))
    assert main(["simulate", str(tmp_path), "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def phases(out: dict) -> dict[str, str]:
    return {g["gang"]: g["phase"] for g in out["gangs"]}


def test_two_competing_gangs_one_completes(tmp_path, capsys):
    # 2 nodes x 4 CPUs fit one gang of 8 one-CPU pods, not two
    out = simulate(tmp_path, capsys, nodes(2, "4") + gang_pods("alpha", 8, t=0) + gang_pods("beta", 8, t=5))
    assert phases(out) == {"default/alpha": "Satisfied", "default/beta": "Pending"}
    assert out["summary"]["bound"] == 8
    beta = [p for p in out["pods"] if p["name"].startswith("beta")]
    assert all(p["phase"] == "Pending" and p["reason"] for p in beta)
    assert all(g["waiting"] == 0 for g in out["gangs"])


def test_twenty_gangs_on_room_for_twelve(tmp_path, capsys):
    # 16 nodes x 6 CPUs = 96 one-CPU pods = 12 gangs of 8
    objects = nodes(16, "6")
    for g in range(20):
        objects += gang_pods(f"job{g:02d}", 8, t=g * 10, step=1)
    out = simulate(tmp_path, capsys, objects)
    ph = phases(out)
    assert sorted(ph.values()).count("Satisfied") == 12
    assert "PartlyBound" not in ph.values()
    assert out["summary"]["bound"] == 96
    assert all(g["waiting"] == 0 for g in out["gangs"])
    # the first twelve by arrival won
    assert [k for k, v in sorted(ph.items()) if v == "Satisfied"] == [f"default/job{g:02d}" for g in range(12)]


def test_example_cluster_has_a_gang_job(capsys):
    assert main(["simulate", str(ROOT / "examples" / "colocation"), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {g["gang"]: g for g in out["gangs"]}
    assert rows["ai/resnet-train"]["phase"] == "Satisfied"
    assert "PartlyBound" not in {g["phase"] for g in out["gangs"]}
