"""Per-node NUMA usage kept by difference: the running sums of the pods' ``numaNodeResources`` on a node.

:meth:`NUMAPolicyMixin._numa_amounts` asks for a node's free amounts whenever its version moves (every pod
assumed or bound there); summing every pod's resource-status each time is O(pods on the node). A ledger
remembers which resource-status it counted for each pod and the sums, and takes out / adds in only the
pods whose status came, went or changed.
"""

from __future__ import annotations

from typing import Any

import attrs

from .numa_policy import POLICY_NONE


@attrs.define
class NodeNUMA:
    """One node's NUMA view for one pod: its effective policy, NUMA nodes, free amounts, and an error."""

    policy: str = POLICY_NONE
    total: dict[int, dict[str, int]] = attrs.field(factory=dict)
    avail: dict[int, dict[str, int]] = attrs.field(factory=dict)
    error: str = ""


class UsedLedger:
    """One node's NUMA usage by its pods' resource-status: ``texts`` (pod uid -> the resource-status counted),
    ``sums`` (NUMA id -> resource -> the sum of their numaNodeResources; a resource some status names is
    present even at 0, as :func:`.numa.available` has it) and the answer (``out``) for the node ``version``
    and reservations counter ``res_gen`` it stands for (``made_gen``: the counter when its sums last moved)."""

    __slots__ = ("_counts", "made_gen", "nrt", "out", "res_gen", "sums", "texts", "version", "zones")

    def __init__(self, nrt: Any, zones: dict[int, dict[str, int]] | str) -> None:
        self.nrt = nrt
        self.zones = zones
        self.version = self.res_gen = self.made_gen = -1
        self.texts: dict[str, str] = {}
        self.sums: dict[int, dict[str, int]] = {}
        self._counts: dict[tuple[int, str], int] = {}  # statuses naming each (NUMA id, resource)
        self.out: tuple[NodeNUMA, tuple[str, ...]] = (NodeNUMA(), ())

    def add(self, used: dict[int, dict[str, int]], sign: int) -> None:
        """Count one pod's numaNodeResources in (``sign`` 1) or out (-1)."""
        for n, res in used.items():
            sums = self.sums.setdefault(n, {})
            for k, v in res.items():
                c = self._counts.get((n, k), 0) + sign
                if c:
                    self._counts[n, k] = c
                    sums[k] = sums.get(k, 0) + sign * v
                else:
                    del self._counts[n, k]
                    del sums[k]
            if not sums:
                del self.sums[n]
