"""resource_profile: resource profiling for BE workloads (koord-manager's Recommendation, Koordinator's peak
predictor): usage against request learnt per workload template from the NodeMetrics' pod usage, and BE
requests right-sized at pod admission from it. See ``docs/replay.md`` (the profiling section)."""

from .plugin import ANNOTATION_ORIGINAL_REQUESTS, ANNOTATION_TEMPLATES, ResourceProfile, original_requests, templates_of
from .profiler import ProfileArgs, Profiler, Recommendation

__all__ = ["ANNOTATION_ORIGINAL_REQUESTS", "ANNOTATION_TEMPLATES", "ProfileArgs", "Profiler", "Recommendation",
           "ResourceProfile", "original_requests", "templates_of"]
