"""image_locality: the cases of kube-scheduler's ``imagelocality/image_locality_test.go``
(TestImageLocalityPriority, TestNormalizedImageName) as facts."""

from __future__ import annotations

import numpy as np
import pytest

from koordfw import CycleState, ManifestError, NodeBatch
from koordfw.builtin.image_locality import ImageLocality, normalized_image_name
from koordfw.core.cluster import ClusterState
from koordfw.core.model import node_from_manifest
from koordfw.inputs import make_pod
from koordfw.testing import ClusterBuilder, schedule

MB = 1024 * 1024


def node(name, *images):
    return node_from_manifest({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                               "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                                          "images": [{"names": list(n), "sizeBytes": s} for n, s in images]}})


IMG_40 = (["gcr.io/40:latest", "gcr.io/40:v1"], 40 * MB)
IMG_300 = (["gcr.io/300:latest", "gcr.io/300:v1"], 300 * MB)
IMG_2000 = (["gcr.io/2000:latest"], 2000 * MB)
IMG_250 = (["gcr.io/250:latest"], 250 * MB)
IMG_10 = (["gcr.io/10:v1"], 10 * MB)


def scores(pod, nodes):
    cluster = ClusterState()
    for n in nodes:
        cluster.add_node(n)
    plugin = ImageLocality()
    batch = NodeBatch(cluster, np.arange(cluster.num_nodes, dtype=np.int64))
    state = CycleState()
    if plugin.pre_score(pod, batch, state) is not None:
        return {n.name: 0 for n in nodes}
    return dict(zip(batch.names, plugin.score(pod, batch, state).tolist()))


def pod(*images, init=()):
    return make_pod("p", containers=[{"name": f"c{i}", "image": im} for i, im in enumerate(images)],
                    initContainers=[{"name": f"i{i}", "image": im} for i, im in enumerate(init)])


def expect(bytes_sum, containers):
    hi = 1000 * MB * containers
    s = min(max(bytes_sum, 23 * MB), hi)
    return 100 * (s - 23 * MB) // (hi - 23 * MB)


def test_two_images_spread_on_two_nodes_prefer_the_larger_one():
    # node1 holds 40 MB (× 1/2 nodes = 20 MB: below the minimum), node2 250 MB (× 1/2 = 125 MB)
    got = scores(pod("gcr.io/40", "gcr.io/250"), [node("machine1", IMG_40, IMG_300), node("machine2", IMG_250, IMG_10)])
    assert got == {"machine1": 0, "machine2": expect(125 * MB, 2)} and got["machine2"] == 5


def test_two_images_on_one_node_prefer_that_node():
    got = scores(pod("gcr.io/40", "gcr.io/300"), [node("machine1", IMG_40, IMG_300), node("machine2", IMG_250, IMG_10)])
    assert got == {"machine1": expect(170 * MB, 2), "machine2": 0} and got["machine1"] == 7


def test_above_the_limit_the_limit_is_used():
    got = scores(pod("gcr.io/2000", "gcr.io/10"), [node("machine1", IMG_2000), node("machine2", IMG_2000)])
    # 2000 MB on every node (spread 1) clamps at 1000 MB × 2 containers
    assert got == {"machine1": 100, "machine2": 100}


def test_init_containers_count():
    got = scores(pod("gcr.io/10:v1", init=("gcr.io/300:v1",)), [node("machine1", IMG_300), node("machine2")])
    assert got == {"machine1": expect(150 * MB, 2), "machine2": 0}


def test_pods_without_images_on_nodes_are_skipped():
    assert scores(pod("busybox"), [node("machine1", IMG_40)]) == {"machine1": 0}


@pytest.mark.parametrize(("name", "want"), [
    ("root", "root:latest"), ("root:tag", "root:tag"), ("gcr.io:5000/root", "gcr.io:5000/root:latest"),
    ("root@sha256:abc", "root@sha256:abc"), ("gcr.io/a/b:v2", "gcr.io/a/b:v2")])
def test_normalized_image_name(name, want):
    assert normalized_image_name(name) == want


def test_the_pod_goes_where_its_large_image_is():
    b = ClusterBuilder()
    b.manifests.nodes.extend([node("machine1"), node("machine2", (["registry.example/ml/trainer:2.1"], 4000 * MB)),
                              node("machine3")])
    b.pod("train", containers=[{"name": "t", "image": "registry.example/ml/trainer:2.1"}])
    assert schedule(b).placements()["default/train"] == "machine2"


def test_a_bad_image_size_names_the_node_and_field():
    with pytest.raises(ManifestError) as e:
        node_from_manifest({"kind": "Node", "metadata": {"name": "n"},
                            "status": {"images": [{"names": ["x"], "sizeBytes": -1}]}})
    assert e.value.field == "status.images[0].sizeBytes"
