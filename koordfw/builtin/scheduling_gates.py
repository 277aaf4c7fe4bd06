"""scheduling_gates: kube-scheduler's SchedulingGates (``pkg/scheduler/framework/plugins/schedulinggates``).

A pod with ``spec.schedulingGates`` is held at pre_enqueue (UnschedulableAndUnresolvable, "waiting for
scheduling gates: [<names>]") until the gates are removed; the pod's update re-checks it. The live
cache already keeps gated pods out of the queue; this is the same rule for the embedded cluster and
for pods handed to the kernel directly.
"""

from __future__ import annotations

from koordfw import Pod, Status, hookimpl


@hookimpl
def pre_enqueue(pod: Pod) -> Status | None:
    if not pod.scheduling_gates:
        return None
    return Status.unresolvable(f"waiting for scheduling gates: [{' '.join(pod.scheduling_gates)}]")
