"""priority_sort: the default queue order: higher ``spec.priority`` first, then earlier arrival."""

from koordfw import Pod, hookimpl


@hookimpl
def queue_sort(pod: Pod) -> tuple[int]:
    return (-pod.priority,)
