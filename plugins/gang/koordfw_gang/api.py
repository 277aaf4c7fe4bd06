"""What other plugins may use of ``koordfw_gang``: how a pod names its gang and how a gang is defined
(the pure parsing of :mod:`koordfw_gang.gang`), so that a plugin placing a gang group as a whole (the
network_topology plugin) finds its members exactly as the gang plugin does."""

from .gang import (
    MODE_NON_STRICT,
    MODE_STRICT,
    GangDefinitionError,
    GangSpec,
    gang_id_of,
    group_id_of,
    is_crd_gang,
    spec_from_pod,
    spec_from_pod_group,
)

__all__ = ["MODE_NON_STRICT", "MODE_STRICT", "GangDefinitionError", "GangSpec", "gang_id_of", "group_id_of",
           "is_crd_gang", "spec_from_pod", "spec_from_pod_group"]
