"""cpu_normalization: Koordinator's CPU normalization for koordfw (koord-manager's ``cpunormalization``
noderesource plugin): the node annotation ``node.koordinator.sh/cpu-normalization-ratio`` from the node's
CPU model and ``cpu-normalization-config``. See ``docs/plugins/cpu_normalization.md``."""

from .plugin import CPUNormalization, CPUNormalizationArgs
from .strategy import Config, Strategy, check_ratio, cpu_ratio, format_ratio, parse_config, ratio_from_model

__all__ = ["CPUNormalization", "CPUNormalizationArgs", "Config", "Strategy", "check_ratio", "cpu_ratio",
           "format_ratio", "parse_config", "ratio_from_model"]
