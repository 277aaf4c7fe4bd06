"""koordlet's predict server and checkpoint tests (``predict_server_test.go``: TestDefaultHistogram,
TestPredictServerGCOldModels, TestDoCheckpoint, _MaxPerStep, _CheckpointInterval, _RestoreModels;
``checkpoint_test.go``: TestSaveAndRestore, TestRestoreError), ported; plus corrupt checkpoints."""

from __future__ import annotations

import json
import os

import pytest
from koordfw_prediction import FileCheckpointer, ModelCheckpoint, PeakPredictServer, PodSample, ServerConfig, node_item_uid
from koordfw_prediction.server import Model, p90

NOW = 1_800_000_000.0
Mi = 2**20


def delta(a: float, b: float) -> float:
    return abs(a - b) / b


@pytest.mark.parametrize(("which", "lo", "hi"), [("cpu", 0.05, 1024.0), ("memory", float(10 << 20), float(1 << 31))])
def test_default_histogram(which, lo, hi):
    m = Model(ServerConfig())
    h = m.cpu if which == "cpu" else m.memory
    h.add_sample(lo, 1, NOW)
    h.add_sample(hi, 1, NOW)
    assert delta(h.percentile(1.0), hi) <= 0.05 and delta(h.percentile(0.0), lo) <= 0.05


def test_gc_old_models():
    srv = PeakPredictServer(ServerConfig())
    srv.train([], [0.0], [256.0 * Mi], NOW)
    assert len(srv.models) == 7  # the node, five priority classes, the system
    srv.gc(NOW + 30 * 60 + 60)
    assert len(srv.models) == 0


def models(srv: PeakPredictServer, *uids: str) -> None:
    for u in uids:
        srv.models[u] = Model(srv.cfg)
    srv.synced = True


def test_do_checkpoint(tmp_path):
    srv = PeakPredictServer(ServerConfig(), FileCheckpointer(str(tmp_path)))
    models(srv, "model1", "model2")
    assert srv.checkpoint(NOW) == 2
    assert [m.last_checkpointed for m in srv.models.values()] == [NOW, NOW]
    assert sorted(os.listdir(tmp_path)) == ["model1", "model2"]


def test_do_checkpoint_max_per_step(tmp_path):
    srv = PeakPredictServer(ServerConfig(model_checkpoint_max_per_step=1), FileCheckpointer(str(tmp_path)))
    models(srv, "model1", "model2", "model3")
    srv.checkpoint(NOW)
    assert sum(m.last_checkpointed == NOW for m in srv.models.values()) == 1


def test_do_checkpoint_interval(tmp_path):
    srv = PeakPredictServer(ServerConfig(), FileCheckpointer(str(tmp_path)))
    models(srv, "model1", "model2", "model3")
    for m in srv.models.values():
        m.last_checkpointed = NOW - 60  # checkpointed a minute ago: within the 10 minutes
    assert srv.checkpoint(NOW) == 0
    assert srv.checkpoint(NOW + 10 * 60) == 3


def test_restore_models_and_unknown_ones_removed(tmp_path):
    ck = FileCheckpointer(str(tmp_path))
    srv = PeakPredictServer(ServerConfig(), ck)
    srv.train([PodSample("pod-1", "koord-prod", [1.0, 2.0], [Mi * 100.0]),
               PodSample("pod-gone", "koord-prod", [1.0], [Mi * 100.0])], [3.0], [Mi * 500.0], NOW)
    assert srv.checkpoint(NOW) == 9
    before = srv.get_prediction("pod-1")
    again = PeakPredictServer(ServerConfig(), FileCheckpointer(str(tmp_path)))
    restored = again.restore(["pod-1"])
    assert sorted(restored) == sorted(set(srv.models) - {"pod-gone"})
    assert "pod-gone" not in os.listdir(tmp_path)  # an unknown UID's checkpoint is removed
    assert again.get_prediction("pod-1") == before
    assert again.models["pod-1"].last_updated == NOW


def test_save_and_restore_round_trip(tmp_path):
    ck = FileCheckpointer(str(tmp_path / "d"))
    ck.save(ModelCheckpoint("uid-1", {"totalWeight": 1.0}, {"totalWeight": 2.0}, "2027-01-15T08:00:00Z"))
    (tmp_path / "d" / "uid-2.tmp").write_text("half a write")
    [got] = ck.restore()
    assert (got.uid, got.cpu, got.memory, got.error) == ("uid-1", {"totalWeight": 1.0}, {"totalWeight": 2.0}, "")
    assert os.listdir(tmp_path / "d") == ["uid-1"]  # the leftover .tmp is removed
    assert json.loads((tmp_path / "d" / "uid-1").read_text())["UID"] == "uid-1"


T = "2027-01-15T08:00:00Z"


@pytest.mark.parametrize("content", ["{not json", "[]", json.dumps({"CPU": {}, "Memory": {}}),
                                     json.dumps({"CPU": {"totalWeight": -1}, "Memory": {}, "LastUpdated": T}),
                                     json.dumps({"CPU": {"bucketWeights": {"100000": 1}, "totalWeight": 1},
                                                 "Memory": {}, "LastUpdated": T}),
                                     "x" * (300 * 1024)])
def test_a_corrupt_checkpoint_is_logged_removed_and_ignored(tmp_path, content, capsys):
    (tmp_path / node_item_uid("sys")).write_text(content)
    srv = PeakPredictServer(ServerConfig(), FileCheckpointer(str(tmp_path)))
    assert srv.restore([]) == []
    assert srv.models == {} and os.listdir(tmp_path) == []
    assert "ignoring a corrupt prediction checkpoint" in capsys.readouterr().out


def test_an_unwritable_checkpoint_directory_is_logged_not_raised(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    srv = PeakPredictServer(ServerConfig(), FileCheckpointer(str(tmp_path / "file" / "sub")))
    models(srv, "m")
    assert srv.checkpoint(NOW) == 1
    assert "save checkpoint failed" in capsys.readouterr().out


def test_training_sums_priority_items_and_derives_the_system():
    srv = PeakPredictServer(ServerConfig())
    srv.train([PodSample("a", "koord-prod", [1.0] * 10, [100.0 * Mi] * 10),
               PodSample("b", "koord-batch", [2.0] * 10, [200.0 * Mi] * 10),
               PodSample("c", "koord-prod", [], [])], [4.0] * 10, [1000.0 * Mi] * 10, NOW)
    assert "c" not in srv.models  # no samples in the interval: skipped
    sys = srv.get_prediction(node_item_uid("sys"))
    prod = srv.get_prediction(node_item_uid("koord-prod"))
    assert sys is not None and prod is not None
    # sys = node - all pods = 4 - 3 = 1 core: its p95 is the end of 1's bucket (within 5 %)
    assert 1000 <= sys["p95"]["cpu"] <= 1050 and 1000 <= prod["p95"]["cpu"] <= 1050
    # a class without pods gets zero samples: as in Go, a percentile is the end of the first bucket
    assert srv.get_prediction(node_item_uid("koord-mid"))["p95"] == {"cpu": 25, "memory": 5 * Mi}


def test_p90_is_the_metric_caches():
    assert p90([float(i) for i in range(1, 11)]) == 9.0  # index int(10 * 0.9) - 1 = 8
    assert p90([5.0]) == 5.0
