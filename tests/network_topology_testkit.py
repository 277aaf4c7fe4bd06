"""What the network-topology live tests (fake API server and real kube-apiserver) share: Koordinator's wire names
for network-topology-aware gangs and the ClusterNetworkTopology ``default`` of spine, block and node layers."""

from __future__ import annotations

import json

PG_LABEL = "pod-group.scheduling.sigs.k8s.io"
SPEC = "gang.scheduling.koordinator.sh/network-topology-spec"
INDEX = "gang.scheduling.koordinator.sh/network-topology-index"
SPINE, BLOCK = "network.topology.nvidia.com/spine", "network.topology.nvidia.com/block"
CNT = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "ClusterNetworkTopology",
       "metadata": {"name": "default"},
       "spec": {"networkTopologySpec": [
           {"topologyLayer": "spineLayer", "labelKey": [SPINE]},
           {"topologyLayer": "blockLayer", "parentTopologyLayer": "spineLayer", "labelKey": [BLOCK]},
           {"topologyLayer": "NodeTopologyLayer", "parentTopologyLayer": "blockLayer"}]}}
MUST_GATHER_BLOCK = json.dumps({"gatherStrategy": [{"layer": "blockLayer", "strategy": "MustGather"}]})
