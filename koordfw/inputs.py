"""Reading what plugins are given, with errors that name the object and field: bounded JSON and YAML
(:func:`loads_json`, :func:`load_yaml`), fields of other objects (:func:`field_mapping`,
:func:`resource_map`, NodeMetrics: :func:`read_node_metric`), times, label selectors, a node's
raw-allocatable annotation, manifests and directories of them, and test builders of pods and nodes."""

from .core.manifests import (
    Manifests,
    NodeMetricStatus,
    PodMetric,
    field_list,
    field_mapping,
    load_manifests,
    load_objects,
    node_metric_name,
    read_node_metric,
    resource_map,
)
from .core.model import make_node, make_pod, parse_time, raw_allocatable, selector_matches
from .core.profile import camel
from .core.safeload import load_yaml, load_yaml_all, loads_json, shorten

__all__ = ["Manifests", "NodeMetricStatus", "PodMetric", "camel", "field_list", "field_mapping", "load_manifests",
           "load_objects", "load_yaml", "load_yaml_all", "loads_json", "make_node", "make_pod", "node_metric_name",
           "parse_time", "raw_allocatable", "read_node_metric", "resource_map", "selector_matches", "shorten"]
