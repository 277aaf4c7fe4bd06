"""Pod-level preemption releases its victims' quota usage (issue 34's leftover): default_preemption's
``select_victims_on_node`` (kube's SelectVictimsOnNode) tells the plugins' pre_filter state of each pod it
takes off or puts back (kube's ``RunPreFilterExtensionRemovePod`` / ``AddPod``), and elastic_quota's
``pre_filter_remove_pod`` / ``pre_filter_add_pod`` take it out of / add it back to the cycle's quota
snapshot, which its ``filter`` checks (Koordinator's ElasticQuota ``RemovePod`` / ``AddPod`` and the
``used + request <= limit`` check of its SelectVictimsOnNode)."""

from __future__ import annotations

from typing import Any

from elastic_quota_testkit import eq

from koordfw import Status, hookimpl
from koordfw.builtin.default_preemption import select_victims_on_node
from koordfw.testing import ClusterBuilder, schedule

QN = "quota.scheduling.koordinator.sh/name"
HIGH, LOW = 1000, 1


class NoRelease:
    """The handle of a preemption that does not run the pre_filter extensions (what it did before)."""

    def __init__(self, handle: Any) -> None:
        self._h = handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self._h, name)

    async def run_pre_filter_extension_remove_pod(self, *a: Any) -> Status:
        return Status.success()

    async def run_pre_filter_extension_add_pod(self, *a: Any) -> Status:
        return Status.success()


class Probe:
    """A post_filter running default_preemption's victim search on n0 for the pod quota rejected, with and
    without the extensions, before anything is evicted."""

    def __init__(self) -> None:
        self.found: dict[str, Any] = {}

    @hookimpl
    async def post_filter(self, pod, state, handle):
        self.found[pod.name] = (await select_victims_on_node(pod, "n0", state, handle),
                                await select_victims_on_node(pod, "n0", state, NoRelease(handle)))
        return None


def _cluster(max_cpu: str) -> ClusterBuilder:
    b = ClusterBuilder().obj(eq("qa", min={"cpu": "1"}, max={"cpu": max_cpu}))
    b.node("n0", cpu="4")
    b.pod("a-low-1", cpu="2", node="n0", priority=LOW, labels={QN: "qa"})
    b.pod("a-low-2", cpu="2", node="n0", priority=LOW, labels={QN: "qa"})
    b.pod("hi", cpu="2", priority=HIGH, labels={QN: "qa"})
    return b


PROFILE = {"plugins": {"postFilter": {"disabled": ["*"], "enabled": ["probe"]}},
           "pluginConfig": {"elastic_quota": {"enableRuntimeQuota": False}}}


def test_default_preemption_releases_the_victims_quota_at_max():
    """qa is at its max (4 CPU, a-low-1 and a-low-2): ``hi`` is rejected by the quota at pre_filter. With
    the victims' usage released one victim is enough (a-low-1, more important by name at equal priority and
    age, is reprieved: 2 + 2 <= 4 and the node has room); without it no victim set helps."""
    probe = Probe()
    schedule(_cluster("4"), plugins={"probe": probe}, only=("elastic_quota",), profile=PROFILE)
    released, unreleased = probe.found["hi"]
    assert released is not None and [v.name for v in released[0]] == ["a-low-2"]
    assert unreleased is None


def test_a_victim_is_reprieved_only_while_the_quota_still_holds():
    """max 3: putting a-low-1 back (2 + 2 > 3) breaks the quota although the node would hold it, so both go."""
    probe = Probe()
    schedule(_cluster("3"), plugins={"probe": probe}, only=("elastic_quota",), profile=PROFILE)
    released, unreleased = probe.found["hi"]
    assert released is not None and sorted(v.name for v in released[0]) == ["a-low-1", "a-low-2"]
    assert unreleased is None
