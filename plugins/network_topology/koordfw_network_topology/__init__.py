"""koordfw_network_topology: network-topology-aware gang placement (Koordinator's ClusterNetworkTopology).
The plugin is :class:`koordfw_network_topology.plugin.NetworkTopology`, entry point ``network_topology``."""

from .plugin import NetworkTopology
from .solver import NetworkTopologySpec, parse_spec, place
from .tree import Topology, parse_layers

__all__ = ["NetworkTopology", "NetworkTopologySpec", "Topology", "parse_layers", "parse_spec", "place"]
