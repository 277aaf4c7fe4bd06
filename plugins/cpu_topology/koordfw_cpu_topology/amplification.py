"""Resource amplification in the cpu_topology scheduler plugin: Koordinator's nodenumaresource
accounting of cpuset-bound pods on a node whose cpu is amplified.

The manager (``resource_amplification``) writes ``node.koordinator.sh/resource-amplification-ratio``
and amplifies the node's cpu allocatable (raw × ratio); pods keep their physical requests, and the
built-in resource fit compares the two as Koordinator's NodeResourcesFit does. A pod with a cpuset owns
its physical CPUs: nobody shares them, so on an amplified node each bound CPU stands for ``ratio`` of
the amplified allocatable. Koordinator's ``filterAmplifiedCPUs`` (nodenumaresource ``Filter``, for every
pod with a cpu request on a node whose cpu ratio is above 1):

* the pod's cpu request counts ``Amplify(request, ratio)`` when the pod binds CPUs on that node
  (``requestCPUBind``: an LSE/LSR cpuset pod, or any pod on a node forcing a bind policy), else as is;
* the node's requested cpu (physical, from every pod on it) has its bound CPUs replaced by their
  amplified amount: ``requested - bound + Amplify(bound, ratio)``, where ``bound`` is the CPUs held by
  cpusets × 1000 (only when ``requested >= bound > 0``);
* the pod fits when its amount is at most ``allocatable - that``; else ``Insufficient amplified cpu``.
  An unreadable ratio annotation refuses the node (``node(s) invalid CPU amplification ratio``), and so
  does a CPU topology that is present but invalid (Koordinator's ``GetAvailableCPUs`` error).

``Amplify(v, r)`` is ``ceil(v × r)`` for ``r > 1`` (``extension.Amplify``). The score of a bound pod counts
the node's bound CPUs and the pod's CPUs the same way (``Amplify`` of each, as Koordinator's
``calculateAllocatableAndRequested`` / ``scoreWithAmplifiedCPUs``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from koordfw import BoundedCache, IdentityKey, Status
from koordfw.extension import ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO

ERR_INVALID_CPU_AMPLIFICATION_RATIO = "node(s) invalid CPU amplification ratio"
ERR_INSUFFICIENT_AMPLIFIED_CPU = "Insufficient amplified cpu"

#: the node's cpu ratio when its annotation has none (``GetNodeResourceAmplificationRatio``'s -1)
NO_RATIO = -1.0


def parse_cpu_ratio(text: str | None) -> float:
    """``GetNodeResourceAmplificationRatio(annotations, cpu)``: the cpu ratio of the annotation's JSON map,
    ``NO_RATIO`` without the annotation or a cpu entry; ValueError when the value is not a JSON object of
    numbers (a JSON ``null`` entry is 0, as Go's unmarshalling leaves it)."""
    if text is None:
        return NO_RATIO
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ValueError(f"failed to unmarshal node resource amplification ratio: {e}") from None
    if obj is None:
        return NO_RATIO
    if not isinstance(obj, dict):
        raise ValueError("failed to unmarshal node resource amplification ratio: expected a JSON object")
    for k, v in obj.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ValueError(f"failed to unmarshal node resource amplification ratio: {k}: expected a number")
    if "cpu" not in obj:
        return NO_RATIO
    return float(obj["cpu"] or 0)


def amplify(value: int, ratio: float) -> int:
    """``extension.Amplify``: ``ceil(value × ratio)`` when the ratio is above 1, else ``value``."""
    if ratio <= 1:
        return value
    return int(math.ceil(float(value) * ratio))


def amplify_array(values: np.ndarray, ratios: np.ndarray) -> np.ndarray:
    """:func:`amplify` element-wise (int64 values, float64 ratios; the same float arithmetic as Go's)."""
    up = np.ceil(values.astype(np.float64) * np.maximum(ratios, 1.0)).astype(np.int64)
    return np.where(ratios > 1, up, values)


def amplified_requested(requested_milli: int, bound_cpus: int, ratio: float) -> int:
    """The node's requested cpu (milli) with its cpuset-bound CPUs counted amplified (``filterAmplifiedCPUs``)."""
    bound = bound_cpus * 1000
    if ratio > 1 and requested_milli >= bound > 0:
        return requested_milli - bound + amplify(bound, ratio)
    return requested_milli


def fits_amplified(pod_milli: int, request_bind: bool, ratio: float, allocatable_milli: int, requested_milli: int,
                   bound_cpus: int) -> bool:
    """Koordinator's ``filterAmplifiedCPUs`` check for one node (True: no objection)."""
    if pod_milli == 0 or ratio <= 1:
        return True
    need = amplify(pod_milli, ratio) if request_bind else pod_milli
    return need <= allocatable_milli - amplified_requested(requested_milli, bound_cpus, ratio)


def parse_ratios(text: str | None) -> dict[str, float]:
    """``GetNodeResourceAmplificationRatios``: resource -> ratio of the annotation's JSON map ({} without it);
    ValueError as :func:`parse_cpu_ratio`."""
    if text is None:
        return {}
    parse_cpu_ratio(text)  # the same checks
    obj = json.loads(text)
    return {str(k): float(v or 0) for k, v in (obj or {}).items()}


def amplify_numa(total: Mapping[int, Mapping[str, int]], ratios: Mapping[str, float]) -> dict[int, dict[str, int]]:
    """``amplifyNUMANodeResources``: each NUMA node's resources amplified by the node's ratios."""
    return {n: {r: amplify(v, ratios.get(r, 1.0)) for r, v in res.items()} for n, res in total.items()}


def numa_available_amplified(total: Mapping[int, Mapping[str, int]], allocated: Mapping[int, Mapping[str, int]],
                             bound_cpus: Mapping[int, int], cpu_ratio: float
                             ) -> tuple[dict[int, dict[str, int]], dict[int, dict[str, int]]]:
    """``NodeAllocation.getAvailableNUMANodeResources`` on an amplified node: (available, allocated) per NUMA
    node, from the amplified totals and what the pods hold there (``allocated``, physical); on a NUMA node
    where pods hold something, its cpuset-bound CPUs (``bound_cpus``) count amplified."""
    avail: dict[int, dict[str, int]] = {}
    held: dict[int, dict[str, int]] = {}
    for n, res in total.items():
        got = allocated.get(n)
        used: dict[str, int] = {}
        if got is not None:
            used = dict(got)
            if cpu_ratio > 1:
                bound = bound_cpus.get(n, 0) * 1000
                used["cpu"] = used.get("cpu", 0) - bound + amplify(bound, cpu_ratio)
            held[n] = used
        avail[n] = {r: max(v - used.get(r, 0), 0) for r, v in res.items()}
    return avail, held


class NUMAAmplification:
    """The NUMA policy's side of amplification (mixed into the NUMA policy mixin; the host class provides
    ``_node_state``)."""

    def _numa_amp_init(self) -> None:
        #: amplification ratio annotation text -> its ratios above 1
        self._numa_ratio_texts: BoundedCache[str, dict[str, float]] = BoundedCache(4096)

    def _numa_ratios(self, view: Any) -> dict[str, float]:
        """The node's amplification ratios above 1 ({} for a node not amplified, or whose annotation is
        unreadable: the amplified-cpu filter refuses that node)."""
        text = view.node.annotations.get(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO)
        if text is None:
            return {}
        hit = self._numa_ratio_texts.get(text)
        if hit is None:
            try:
                hit = {k: v for k, v in parse_ratios(text).items() if v > 1}
            except ValueError:
                hit = {}
            self._numa_ratio_texts[text] = hit
        return hit

    def _numa_bound_cpus(self, view: Any) -> dict[int, int]:
        """NUMA id -> the node's cpuset-bound CPUs there."""
        ns = self._node_state(view)  # type: ignore[attr-defined]
        if ns is None or ns.topology is None:
            return {}
        out: dict[int, int] = {}
        for c in ns.allocation.cpus:
            info = ns.topology.details.get(c)
            if info is not None:
                out[info.node & 0xFFFF] = out.get(info.node & 0xFFFF, 0) + 1
        return out

    def _numa_requests(self, view: Any, st: Any) -> dict[str, int]:
        """The pod's requests as the NUMA hints see them on ``view``: a bound pod's cpu amplified on an amplified
        node (``getResourceOptions``); the split at reserve stays physical."""
        ratio = self._numa_ratios(view).get("cpu", 1.0) if st.request_bind else 1.0
        if ratio <= 1 or not st.requests.get("cpu"):
            return st.requests
        return {**st.requests, "cpu": amplify(int(st.requests["cpu"]), ratio)}


class AmplificationMixin:
    """Per-node cpu ratio columns, the amplified-cpu filter and the score's amplified accounting. The host
    class (:class:`~.plugin.CPUTopologyPlugin`) provides ``_n_alloc`` (CPUs bound per node; -1 when the
    node's CPU topology is present but invalid) and ``_nodes`` (each node's ``NodeCPUState``)."""

    _n_alloc: np.ndarray
    _nodes: list[Any]

    def _amp_init(self) -> None:
        #: the cluster the columns are of, and the node versions they were read at
        self._amp_key: Any = None
        self._amp_ver = np.zeros(0, dtype=np.int64)
        #: each node's cpu ratio (NO_RATIO: none), and whether its annotation is unreadable
        self._amp_ratio = np.zeros(0, dtype=np.float64)
        self._amp_bad = np.zeros(0, dtype=bool)
        #: annotation text -> its cpu ratio (None: unreadable)
        self._amp_texts: BoundedCache[str, float | None] = BoundedCache(4096)

    def _ratio_of(self, annotations: Mapping[str, str]) -> float | None:
        text = annotations.get(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO)
        if text is None:
            return NO_RATIO
        if text in self._amp_texts:
            return self._amp_texts[text]
        try:
            ratio: float | None = parse_cpu_ratio(text)
        except ValueError:
            ratio = None
        self._amp_texts[text] = ratio
        return ratio

    def amp_columns(self, cluster: Any) -> tuple[np.ndarray, np.ndarray]:
        """(cpu ratio per node, unreadable annotation per node), re-read for nodes whose version changed."""
        key = IdentityKey(cluster)
        n = cluster.num_nodes
        if key != self._amp_key:
            self._amp_key = key
            self._amp_ver = np.zeros(0, dtype=np.int64)
            self._amp_ratio = np.zeros(0, dtype=np.float64)
            self._amp_bad = np.zeros(0, dtype=bool)
        extra = n - len(self._amp_ver)
        if extra > 0:
            self._amp_ver = np.concatenate([self._amp_ver, np.full(extra, -1, dtype=np.int64)])
            self._amp_ratio = np.concatenate([self._amp_ratio, np.full(extra, NO_RATIO)])
            self._amp_bad = np.concatenate([self._amp_bad, np.zeros(extra, dtype=bool)])
        version = cluster.node_version
        stale = np.flatnonzero(self._amp_ver[:n] != version)
        if len(stale):
            views = cluster.views
            for i in stale.tolist():
                ratio = self._ratio_of(views[i].node.annotations)
                self._amp_ratio[i] = NO_RATIO if ratio is None else ratio
                self._amp_bad[i] = ratio is None
                self._amp_ver[i] = version[i]
        return self._amp_ratio[:n], self._amp_bad[:n]

    def any_amplified(self, cluster: Any) -> bool:
        """Whether some node's cpu is amplified (or its ratio unreadable): then every pod with a cpu request
        goes through :meth:`amplified_cpu_filter`, as every such pod goes through Koordinator's Filter."""
        ratio, bad = self.amp_columns(cluster)
        return bool((ratio > 1).any() or bad.any())

    def amplified_cpu_filter(self, cluster: Any, idx: np.ndarray, cpu_milli: int, binding: np.ndarray
                             ) -> dict[str, Status]:
        """``filterAmplifiedCPUs`` over the candidate nodes ``idx`` (``binding``: the pod binds CPUs there):
        the rejected nodes' statuses. Call after the host refreshed its node columns."""
        if cpu_milli <= 0:
            return {}
        ratio_all, bad_all = self.amp_columns(cluster)
        ratio, bad = ratio_all[idx], bad_all[idx]
        amp = ratio > 1
        if not (amp.any() or bad.any()):
            return {}
        ci = cluster.resource_index("cpu")
        alloc = cluster.allocatable[idx, ci]
        req = cluster.requested[idx, ci]
        n_bound = self._n_alloc[idx]
        broken = amp & (n_bound < 0)
        bound = np.maximum(n_bound, 0) * 1000
        adjusted = np.where(amp & (req >= bound) & (bound > 0), req - bound + amplify_array(bound, ratio), req)
        pod = np.where(binding & amp, amplify_array(np.full(len(idx), cpu_milli, dtype=np.int64), ratio), cpu_milli)
        short = amp & ~broken & (pod > alloc - adjusted)
        out: dict[str, Status] = {}
        views = cluster.views
        for j in np.flatnonzero(bad | broken | short).tolist():
            i = int(idx[j])
            if bad[j]:
                out[views[i].name] = Status.unresolvable(ERR_INVALID_CPU_AMPLIFICATION_RATIO)
            elif broken[j]:
                ns = self._nodes[i]  # a broken topology always carries its error (see _store_columns)
                out[views[i].name] = Status.unresolvable(ns.error if ns is not None else
                                                         ERR_INSUFFICIENT_AMPLIFIED_CPU)
            else:
                out[views[i].name] = Status.unschedulable(ERR_INSUFFICIENT_AMPLIFIED_CPU)
        return out

    def amplified_bound_milli(self, cluster: Any, idx: np.ndarray, cpu_milli: int, bound: np.ndarray) -> np.ndarray:
        """The score's requested cpu (milli) of a bound pod: ``bound`` (CPUs bound once the pod's are added;
        -1: cannot place) × 1000, except on amplified nodes, where the node's bound CPUs and the pod's each
        count ``Amplify(cpus × 1000, ratio)``."""
        plain = bound * 1000
        ratio = self.amp_columns(cluster)[0][idx]
        amp = ratio > 1
        if not amp.any():
            return plain
        held = np.maximum(self._n_alloc[idx], 0) * 1000
        amped = amplify_array(held, ratio) + amplify_array(np.full(len(idx), cpu_milli, dtype=np.int64), ratio)
        return np.where(amp & (bound >= 0), amped, plain)


def merge_refusals(numa: Mapping[str, Status], amplified: Mapping[str, Status], not_match: str) -> dict[str, Status]:
    """The filter's refusals in Koordinator's order: a NUMA policy mismatch (``not_match``) first, then the
    amplified-cpu check, then the NUMA hint's refusals."""
    out = dict(numa)
    for name, status in amplified.items():
        prior = out.get(name)
        if prior is None or not_match not in prior.reasons:
            out[name] = status
    return out
