"""koordfw_gang: Koordinator coscheduling (gang scheduling) for koordfw. The plugin is
:class:`koordfw_gang.plugin.Coscheduling`, registered under the entry-point name ``gang``."""

from .args import CoschedulingArgs
from .gang import Gang, GangSpec, parse_go_duration, spec_from_pod, spec_from_pod_group
from .plugin import Coscheduling

__all__ = ["Coscheduling", "CoschedulingArgs", "Gang", "GangSpec", "parse_go_duration", "spec_from_pod",
           "spec_from_pod_group"]
