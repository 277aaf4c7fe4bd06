"""node_resources_balanced_allocation: kube-scheduler's NodeResourcesBalancedAllocation score
(``pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go``): nodes where the pod leaves the
requested fractions of its resources (cpu and memory by default) closest to one another score highest,
``(1 - std(fractions)) * 100``, each fraction capped at 1, with the pod's own requests (``useRequested``:
no 100m / 200Mi defaults), an extended resource the pod does not request left out, and a resource the
node does not advertise left out.

Opt-in: koordfw's default profile does not run it (``koordfw.core.plugins.OPT_IN_BUILTINS``); a profile
enables it at ``score`` (a KubeSchedulerConfiguration's ``NodeResourcesBalancedAllocation`` maps to it,
with its weight), as kube-scheduler's default profile does beside NodeResourcesFit.
"""

from __future__ import annotations

import attrs
import numpy as np

from koordfw import Handle, NodeBatch, Pod, StashKey, hookimpl

from . import node_resources_fit as _fit


@attrs.define
class Args:
    #: the resources compared (kube's ``resources``; weights are not used by this score)
    resources: list[_fit.ResourceWeight] = attrs.field(
        factory=lambda: [_fit.ResourceWeight("cpu"), _fit.ResourceWeight("memory")])


#: node_resources_fit's args for its BalancedAllocation strategy, made once per args object
_FIT_ARGS = StashKey[tuple[Args, _fit.Args]]()


@hookimpl
def plugin_args() -> type[Args]:
    return Args


@hookimpl
def score(pod: Pod, nodes: NodeBatch, args: Args, handle: Handle) -> np.ndarray | None:
    got = handle.stash.get(_FIT_ARGS, None)
    if got is None or got[0] is not args:
        got = handle.stash[_FIT_ARGS] = (args, _fit.Args(scoring_strategy="BalancedAllocation",
                                                         resources=list(args.resources)))
    return _fit.score(pod, nodes, got[1], handle)
