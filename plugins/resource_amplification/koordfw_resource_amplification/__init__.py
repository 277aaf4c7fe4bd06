"""resource_amplification: Koordinator's node resource amplification for koordfw: the ratio annotation
``node.koordinator.sh/resource-amplification-ratio`` from ``resource-amplification-config`` and the CPU
normalization ratio, and cpu/memory allocatable amplified from ``node.koordinator.sh/raw-allocatable``.
See ``docs/plugins/resource_amplification.md``."""

from .amplification import (
    SUPPORTED_RESOURCES,
    amplified_allocatable,
    amplify,
    calculate_ratios,
    format_ratios,
    parse_config,
    parse_ratios,
)
from .plugin import ResourceAmplification, ResourceAmplificationArgs

__all__ = ["SUPPORTED_RESOURCES", "ResourceAmplification", "ResourceAmplificationArgs", "amplified_allocatable",
           "amplify", "calculate_ratios", "format_ratios", "parse_config", "parse_ratios"]
