"""read_node_metric keeps its parse per object while the object's content is unchanged: the readers of one
NodeMetric (batch_resource, load_aware) share it. The memo never serves a stale parse: a replaced object,
one changed in place (even to an equal-comparing value of another type) or one that turned invalid is
read again; a limited reading (``only``) taken from the full one equals reading with ``only``."""

import copy

import pytest
from koordfw_batch_resource import BatchResource, ColocationStrategy
from koordfw_load_aware import LoadAware, LoadAwareArgs

from koordfw import ClusterState, ManifestError, make_node, make_pod, read_node_metric
from koordfw.core import manifests


def metric(cpu="2", pods=(("web", "1", "1Gi"),), gpu="1"):
    res = {"cpu": cpu, "memory": "4Gi"}
    if gpu is not None:
        res["nvidia.com/gpu"] = gpu
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "n1"},
            "status": {"updateTime": "2026-11-01T00:00:00Z",
                       "nodeMetric": {"nodeUsage": {"resources": res},
                                      "systemUsage": {"resources": {"cpu": "500m"}}},
                       "podsMetric": [{"namespace": "default", "name": n, "priority": "koord-prod",
                                       "podUsage": {"resources": {"cpu": c, "memory": m, "nvidia.com/gpu": "1"}}}
                                      for n, c, m in pods]}}


def fresh(obj, only=None):
    """The general path: a parse without the memo."""
    return manifests._read_node_metric(obj, only)


def same_reading(a, b):
    def parts(m):
        return (m.name, m.ctx, m.update_time, list(m.node_usage.items()), list(m.system_usage.items()),
                [(p.key, list(p.usage.items()), p.priority) for p in m.pods], m.status, m.node_metric)

    return parts(a) == parts(b)


@pytest.mark.parametrize("only", [None, ("cpu", "memory"), ("memory",), ("nvidia.com/gpu", "cpu")])
def test_memo_equals_a_fresh_parse(only):
    obj = metric()
    first = read_node_metric(obj, only)
    assert same_reading(first, fresh(obj, only))
    assert read_node_metric(obj, only) is first  # kept
    assert same_reading(read_node_metric(copy.deepcopy(obj), only), fresh(obj, only))


def test_readers_share_one_parse_when_nothing_is_left_out():
    obj = metric(gpu=None, pods=[("web", "1", "1Gi")])
    obj["status"]["podsMetric"][0]["podUsage"]["resources"].pop("nvidia.com/gpu")
    assert read_node_metric(obj) is read_node_metric(obj, only=("cpu", "memory"))


def test_a_replaced_object_is_read_again():
    a, b = metric(cpu="2"), metric(cpu="3")
    assert read_node_metric(a).node_usage["cpu"] == 2000
    assert read_node_metric(b).node_usage["cpu"] == 3000
    assert read_node_metric(a).node_usage["cpu"] == 2000


def test_an_object_changed_in_place_is_read_again():
    obj = metric()
    assert read_node_metric(obj, ("cpu",)).pods[0].usage == {"cpu": 1000}
    obj["status"]["podsMetric"][0]["podUsage"]["resources"]["cpu"] = "250m"
    assert read_node_metric(obj, ("cpu",)).pods[0].usage == {"cpu": 250}
    obj["status"]["podsMetric"].append({"name": "job", "podUsage": {"resources": {"cpu": "2"}}})
    assert [p.key for p in read_node_metric(obj).pods] == ["default/web", "default/job"]
    # an equal-comparing value of another type: 1 == 1.0 == True, but True is no quantity
    obj["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = 1
    assert read_node_metric(obj).node_usage["cpu"] == 1000
    obj["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = True
    with pytest.raises(ManifestError, match=r"nodeUsage\.resources\.cpu"):
        read_node_metric(obj)
    obj["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = "2"
    assert read_node_metric(obj).node_usage["cpu"] == 2000


def test_a_bad_resource_outside_only_fails_only_the_full_reading():
    obj = metric(gpu="lots")
    with pytest.raises(ManifestError, match=r"nodeUsage\.resources\.nvidia\.com/gpu"):
        read_node_metric(obj)
    m = read_node_metric(obj, only=("cpu", "memory"))
    assert same_reading(m, fresh(obj, ("cpu", "memory")))
    with pytest.raises(ManifestError):  # errors are not kept: asked again, it fails again
        read_node_metric(obj)


def test_the_shared_reading_is_read_only():
    m = read_node_metric(metric())
    with pytest.raises(TypeError):
        m.node_usage["cpu"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        m.pods[0].usage["cpu"] = 1  # type: ignore[index]


def test_objects_that_are_not_plain_dicts_are_parsed_each_time():
    class Meta(dict):
        pass

    obj = Meta(metric())
    a, b = read_node_metric(obj), read_node_metric(obj)
    assert a is not b and same_reading(a, b)
    assert read_node_metric(metric(), only=["cpu"]).node_usage == {"cpu": 2000}  # an unhashable only


def test_batch_resource_and_load_aware_see_a_metric_changed_in_place():
    """The plugins' own memos follow the kernel's reading, so a change in place reaches them."""
    cluster = ClusterState()
    cluster.add_node(make_node("n1", allocatable={"cpu": "10", "memory": "100Gi"}))
    pod = make_pod("web", requests={"cpu": "1", "memory": "1Gi"}, node_name="n1")
    cluster.add_pod(pod)
    obj = metric(gpu=None, pods=[("web", "1", "1Gi")])
    cluster.set_object("NodeMetric", obj)
    br, strategy = BatchResource(), ColocationStrategy(enable=True)
    view = cluster.node("n1")
    first = br._parsed("n1", obj)
    assert first.pods[0].usage["cpu"] == 1000 and br._parsed("n1", obj) is first
    obj["status"]["podsMetric"][0]["podUsage"]["resources"]["cpu"] = "3"
    assert br._parsed("n1", obj).pods[0].usage["cpu"] == 3000
    assert br.node_resources(view, [pod], obj, 1793491200.0, None, None, strategy) is not None

    cols = LoadAware().columns(LoadAwareArgs())
    assert cols._metric(obj).pod_usage["default/web"]["cpu"] == 3000
    obj["status"]["podsMetric"][0]["podUsage"]["resources"]["cpu"] = "4"
    assert cols._metric(obj).pod_usage["default/web"]["cpu"] == 4000
    obj["spec"] = {"metricCollectPolicy": {"reportIntervalSeconds": 30}}
    assert cols._metric(obj).report_interval == 30.0
    obj["spec"]["metricCollectPolicy"]["reportIntervalSeconds"] = -1
    assert cols._metric(obj) is None
