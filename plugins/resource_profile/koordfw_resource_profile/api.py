"""resource_profile's public API for other packages (the replay): the profile itself and the annotations."""

from .plugin import ANNOTATION_ORIGINAL_REQUESTS, ANNOTATION_TEMPLATES, ResourceProfile, original_requests, templates_of
from .profiler import ProfileArgs, Profiler, Recommendation

__all__ = ["ANNOTATION_ORIGINAL_REQUESTS", "ANNOTATION_TEMPLATES", "ProfileArgs", "Profiler", "Recommendation",
           "ResourceProfile", "original_requests", "templates_of"]
