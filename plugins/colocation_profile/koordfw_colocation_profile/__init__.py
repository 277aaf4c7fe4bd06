"""colocation_profile: Koordinator's ClusterColocationProfile pod admission for koordfw.

``mutate_pod`` applies the matching ``config.koordinator.sh/v1alpha1`` ClusterColocationProfiles to a pod
being created (labels, annotations, QoS and priority class, scheduler name, strategic merge patch) and
converts a batch or mid pod's cpu/memory into ``kubernetes.io/batch-*`` / ``mid-*``; ``validate_pod``
rejects what Koordinator's validating webhook rejects. See ``docs/kubernetes.md`` (the webhook section).
"""

from .plugin import ColocationProfileArgs, aggregate, apply_profiles, mutate_pod, validate_pod, validation_errors
from .podspec import (
    RESOURCE_NAME_MAP,
    convert_resources,
    extended_resource_spec,
    pod_priority_class_raw,
    pod_priority_class_with_default,
    pod_qos_raw,
    pod_requests,
)
from .profile import ColocationProfile, parse_profile, selector_matches
from .smp import PatchError, strategic_merge_pod

__all__ = [
    "RESOURCE_NAME_MAP", "ColocationProfile", "ColocationProfileArgs", "PatchError", "aggregate", "apply_profiles",
    "convert_resources", "extended_resource_spec", "mutate_pod", "parse_profile", "pod_priority_class_raw",
    "pod_priority_class_with_default", "pod_qos_raw", "pod_requests", "selector_matches", "strategic_merge_pod",
    "validate_pod", "validation_errors",
]
