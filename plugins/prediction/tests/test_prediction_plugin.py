"""The prediction plugin in the node agent's round: ``collect`` trains the models and returns the NodeMetric's
``prodReclaimableMetric`` / ``prodPeakMetric`` under ``NodeState.NODE_METRIC_STATUS``, which the agent's
NodeMetric reporter publishes; checkpoints carry the history over a restart.

Worked example (docs/plugins/prediction.md): node allocatable 8 cores / 32Gi, node usage 1.5 cores / 3Gi,
one Prod pod (2 days old) requesting 4 cores / 8Gi and using 1 core / 2Gi, safety margin 10 %. After the
first training every model holds one sample, so each percentile is the end of that sample's bucket
(CPU buckets: 0.025 cores growing by 5 %; memory: 5 MiB growing by 5 %):

    pod      p95 cpu = end of 1.0 core's bucket  = 1.0357 cores → 1035m;  peak 1035 * 1.1 = 1138m
    per pod  reclaimable = 4000 - 1138 = 2862m
    sys      0.5 core → 539m;  koord-prod item 1.0 → 1035m;  the "none" item 0 → 25m (the first bucket's end)
    per priority  unReclaimable = (539 + 1035 + 25) * 1.1 = 1758m;  reclaimable = 4000 - 1758 = 2242m
    prodReclaimable cpu = min(2862, 2242) = 2242m
"""

from __future__ import annotations

import attrs
from koordfw_prediction import CPU_OPTIONS, MEMORY_OPTIONS, Prediction, PredictionArgs

from koordfw import NodeState, PodState
from koordfw.agent.nodemetric import NodeMetricReporter
from koordfw.inputs import make_pod

NOW = 1_800_000_000.0
Gi = 2**30


class Handle:
    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t


def state(pod_usage=(1000, 2 * Gi), node_usage=(1500, 3 * Gi), created=NOW - 2 * 86400) -> NodeState:
    p = attrs.evolve(make_pod("web", requests={"cpu": "4", "memory": "8Gi"}, labels={"koordinator.sh/qosClass": "LS"},
                              priority=9500, node_name="n1"), uid="uid-web", creation_timestamp=created, phase="Running")
    return NodeState(name="n1", allocatable={"cpu": 8000, "memory": 32 * Gi},
                     usage={"cpu": node_usage[0], "memory": node_usage[1]},
                     pods=(PodState("uid-web", pod=p, usage={"cpu": pod_usage[0], "memory": pod_usage[1]}),))


def end(options, value: float) -> float:
    return options.bucket_start(options.find_bucket(value) + 1)


def test_the_worked_example():
    plugin, args = Prediction(), PredictionArgs()
    out = plugin.collect(state(), args, Handle(NOW))
    status = out[NodeState.NODE_METRIC_STATUS]
    assert int(end(CPU_OPTIONS, 1.0) * 1000) == 1035 and int(end(CPU_OPTIONS, 0.5) * 1000) == 539
    assert plugin.last_result["cpu"] == 2242
    pod_mem_peak = int(float(int(end(MEMORY_OPTIONS, 2.0 * Gi))) * 1.1)
    sys_mem, prod_mem, none_mem = (int(end(MEMORY_OPTIONS, v)) for v in (1.0 * Gi, 2.0 * Gi, 0.0))
    mem_unrec = int(float(sys_mem + prod_mem + none_mem) * 1.1)
    assert plugin.last_result["memory"] == min(8 * Gi - pod_mem_peak, 8 * Gi - mem_unrec)
    assert status["prodReclaimableMetric"] == {"resource": {"resources": {
        "cpu": "2242m", "memory": str(plugin.last_result["memory"])}}}
    # the peak: max(per pod 1138m, per priority 1758m)
    assert plugin.last_peak["cpu"] == 1758
    assert status["prodPeakMetric"]["resource"]["resources"]["cpu"] == "1758m"
    # the risk-budget mode's input: one bucket (its end) of weight 1 per model, nothing unpredicted
    dist = status["koordfwProdUsageDistribution"]
    assert [(c["model"], c["cpu"]) for c in dist["components"]] == [
        ("sys", [[539, 1.0]]), ("koord-prod", [[1035, 1.0]]), ("", [[25, 1.0]])]
    assert dist["components"][1]["memory"] == [[prod_mem, 1.0]]
    assert dist["unpredicted"] == {"cpu": "0m", "memory": "0"}


def test_the_usage_distribution_holds_every_training_and_the_cold_start_requests():
    plugin, args = Prediction(), PredictionArgs()
    plugin.collect(state(), args, Handle(NOW))
    plugin.collect(state(pod_usage=(3000, 2 * Gi), node_usage=(3500, 3 * Gi)), args, Handle(NOW + 60))
    dist = plugin.collect(state(), args, Handle(NOW + 60.5))[NodeState.NODE_METRIC_STATUS]["koordfwProdUsageDistribution"]
    prod = dist["components"][1]["cpu"]
    # two samples, 1 core then 3 cores a minute later (decay over one minute of a 12 h half-life)
    assert [v for v, _ in prod] == [1035, int(end(CPU_OPTIONS, 3.0) * 1000)]
    assert abs(prod[0][1] - 0.5) < 1e-3 and abs(sum(w for _, w in prod) - 1) < 1e-6
    young = plugin.collect(state(created=NOW + 60), args, Handle(NOW + 61))[NodeState.NODE_METRIC_STATUS]
    assert young["koordfwProdUsageDistribution"]["unpredicted"] == {"cpu": "4000m", "memory": str(8 * Gi)}


def test_a_pod_younger_than_the_cold_start_window_is_not_reclaimed():
    plugin = Prediction()
    plugin.collect(state(created=NOW - 3600), PredictionArgs(), Handle(NOW))  # 1 h old, window 24 h
    # per pod: nothing reclaimable (its requests are unpredicted): the minimum is 0
    assert plugin.last_result == {"cpu": 0, "memory": 0}
    assert plugin.last_peak["cpu"] == 4000  # its request counts into the peak


def test_training_follows_the_interval_and_the_status_is_published_by_the_reporter():
    plugin, args = Prediction(), PredictionArgs(training_interval="1m")
    rep = NodeMetricReporter()
    for i in range(61):
        ns = state(pod_usage=(1000 + 10 * i, 2 * Gi))
        ns.metrics.update(plugin.collect(ns, args, Handle(NOW + i)))
        rep.observe(ns, NOW + i)
    assert plugin.server.last_training == NOW + 60
    st = rep.status(NOW + 60, [ns.pods[0].pod])
    assert st["prodReclaimableMetric"]["resource"]["resources"]["cpu"] == f"{plugin.last_result['cpu']}m"
    assert st["prodPeakMetric"] and st["nodeMetric"]["nodeUsage"]


def test_before_any_model_koordlet_reports_an_empty_reclaimable_and_no_peak():
    plugin = Prediction()
    plugin._server(PredictionArgs())
    st = plugin._status(state(), [], NOW, PredictionArgs())  # no training yet: no sys model
    assert st == {"prodReclaimableMetric": {"resource": {}}, "prodPeakMetric": None,
                  "koordfwProdUsageDistribution": None}
    rep = NodeMetricReporter()
    ns = state()
    ns.metrics[NodeState.NODE_METRIC_STATUS] = {**st, "nodeMetric": "not this"}
    rep.observe(ns, NOW)
    out = rep.status(NOW, [])
    assert out["prodReclaimableMetric"] == {"resource": {}} and "prodPeakMetric" not in out
    assert "koordfwProdUsageDistribution" not in out
    assert out["nodeMetric"] != "not this"  # the reporter's own fields win


def test_a_restarted_agent_keeps_its_history(tmp_path):
    args = PredictionArgs(checkpoint_filepath=str(tmp_path), training_interval="1m", model_checkpoint_interval="0s",
                          model_checkpoint_max_per_step=100)
    first = Prediction()
    for i in range(0, 3600, 60):  # an hour at 3 cores
        first.collect(state(pod_usage=(3000, 2 * Gi), node_usage=(3500, 3 * Gi)), args, Handle(NOW + i))
    assert (tmp_path / "uid-web").exists() and (tmp_path / "__node-sys__").exists()
    before = first.server.get_prediction("uid-web")
    restarted, fresh = Prediction(), Prediction()
    t = NOW + 3600
    restarted.collect(state(pod_usage=(500, 2 * Gi)), args, Handle(t))  # now idle: one sample
    fresh.collect(state(pod_usage=(500, 2 * Gi)), attrs.evolve(args, checkpoint_filepath=""), Handle(t))
    # the history dominates the restarted agent's p95; the fresh one sees only the idle sample
    assert restarted.server.get_prediction("uid-web")["p95"]["cpu"] == before["p95"]["cpu"] > 3000
    assert fresh.server.get_prediction("uid-web")["p95"]["cpu"] < 600
    assert restarted.last_result["cpu"] < fresh.last_result["cpu"]


def test_a_corrupt_checkpoint_does_not_stop_the_agent(tmp_path, capsys):
    (tmp_path / "uid-web").write_text('{"CPU": {"bucketWeights": {"0": "x"}}, "Memory": {}, "LastUpdated": "x"}')
    plugin = Prediction()
    out = plugin.collect(state(), PredictionArgs(checkpoint_filepath=str(tmp_path)), Handle(NOW))
    assert out[NodeState.NODE_METRIC_STATUS]["prodReclaimableMetric"]["resource"]["resources"]["cpu"] == "2242m"
    assert "ignoring a corrupt prediction checkpoint" in capsys.readouterr().out


def test_args_are_koordlets_flags():
    import pytest

    from koordfw.core.profile import structure_args
    a = structure_args("prediction", PredictionArgs, {"coldStartDuration": "1h", "cpuHistogramDecayHalfLife": "6h",
                                                      "checkpointFilepath": "/var/lib/koordfw/prediction",
                                                      "safetyMarginPercent": 20, "modelCheckpointMaxPerStep": 5})
    assert (a.cold_start_duration, a.cpu_histogram_decay_half_life, a.safety_margin_percent) == (3600.0, 21600.0, 20)
    for bad in ({"trainingInterval": "0s"}, {"coldStartDuration": "-1h"}, {"safetyMarginPercent": -1}):
        with pytest.raises(Exception, match=next(iter(bad))):
            structure_args("prediction", PredictionArgs, bad)


def test_the_documented_node_metric_fields():
    """docs/plugins/prediction.md's YAML, as written there."""
    out = Prediction().collect(state(), PredictionArgs(), Handle(NOW))[NodeState.NODE_METRIC_STATUS]
    assert out.pop("koordfwProdUsageDistribution") == {
        "components": [{"model": "sys", "cpu": [[539, 1.0]], "memory": [[1097586419, 1.0]]},
                       {"model": "koord-prod", "cpu": [[1035, 1.0]], "memory": [[2162529934, 1.0]]},
                       {"model": "", "cpu": [[25, 1.0]], "memory": [[5242880, 1.0]]}],
        "unpredicted": {"cpu": "0m", "memory": "0"}}
    assert out == {"prodReclaimableMetric": {"resource": {"resources": {"cpu": "2242m", "memory": "4998039436"}}},
                   "prodPeakMetric": {"resource": {"resources": {"cpu": "1758m", "memory": "3591895156"}}}}
