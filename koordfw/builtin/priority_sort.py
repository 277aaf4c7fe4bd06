"""priority_sort: the default queue order: higher ``spec.priority`` first, then earlier arrival."""

from koordfw import hookimpl


@hookimpl
def queue_sort(pod):
    return (-pod.priority,)
