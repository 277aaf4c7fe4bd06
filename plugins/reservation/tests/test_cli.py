"""``koordfw simulate`` with reservations (all installed plugins, default profile): the ``reservations``
section in -o json and in the table, and a malformed Reservation as a user error (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from reservation_testkit import pod, reservation

from koordfw.cli import main


def nodes(n: int, cpu: str) -> list[dict]:
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"},
             "status": {"capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                        "allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}}} for i in range(n)]


def write(tmp_path: Path, objects: list[dict]) -> str:
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(objects))
    return str(tmp_path)


OBJECTS = [*nodes(2, "4"),
           reservation("train-workers", {"cpu": "3", "memory": "4Gi"}, t=0, ttl="2h"),
           reservation("surge", {"cpu": "1500m"}, node="n1", allocateOnce=False, t=0),
           *(pod(f"batch-{i}", {"cpu": "1"}, t=10 + i) for i in range(3)),
           pod("worker-0", {"cpu": "2", "memory": "2Gi"}, labels={"app": "web"}, t=100)]


def test_simulate_json_has_the_reservations_section(tmp_path, capsys):
    assert main(["simulate", write(tmp_path, OBJECTS), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in out["reservations"]}
    assert set(rows) == {"surge", "train-workers"}
    assert all(set(r) == {"name", "phase", "node", "allocatable", "allocated", "owners"} for r in rows.values())
    tw = rows["train-workers"]
    assert tw["allocatable"] == {"cpu": "3", "memory": "4Gi"}
    # worker-0 (an owner of both) allocated from one of them; the quantities are Kubernetes quantities
    owned = [r for r in rows.values() if r["owners"] == ["default/worker-0"]]
    assert len(owned) == 1
    assert owned[0]["allocated"] in ({"cpu": "2", "memory": "2Gi"}, {"cpu": "2"})
    assert rows["surge"]["node"] == "n1" and rows["surge"]["allocatable"] == {"cpu": "1500m"}
    worker = next(p for p in out["pods"] if p["name"] == "worker-0")
    ann = json.loads(worker["annotations"]["scheduling.koordinator.sh/reservation-allocated"])
    assert ann == {"name": owned[0]["name"], "uid": f"uid-{owned[0]['name']}"}


def test_simulate_table_shows_reservations(tmp_path, capsys):
    assert main(["simulate", write(tmp_path, OBJECTS)]) == 0
    text = capsys.readouterr().out
    assert "reservations" in text and "train-workers" in text and "surge" in text


def test_malformed_reservation_is_a_user_error(tmp_path, capsys):
    bad = reservation("broken", {"cpu": "1"}, allocatePolicy="Sometimes")
    assert main(["simulate", write(tmp_path, [*nodes(1, "4"), bad])]) == 2
    err = capsys.readouterr().err
    assert "Reservation broken: field spec.allocatePolicy: expected Aligned or Restricted" in err
