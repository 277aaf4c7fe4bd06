"""cpu_burst's args (NodeSLO ``cpuBurstStrategy``, Koordinator's flat names and defaults) and the per-pod
config merged from the pod annotation ``koordinator.sh/cpuBurst`` (``genPodBurstConfig``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from koordfw.inputs import camel, loads_json

#: CPUBurstPolicy values (apis/slo/v1alpha1/nodeslo_types.go)
POLICY_NONE = "none"
POLICY_CPU_BURST_ONLY = "cpuBurstOnly"
POLICY_CFS_QUOTA_BURST_ONLY = "cfsQuotaBurstOnly"
POLICY_AUTO = "auto"
POLICIES = (POLICY_NONE, POLICY_CPU_BURST_ONLY, POLICY_CFS_QUOTA_BURST_ONLY, POLICY_AUTO)


def _range(lo: int, hi: int | None) -> Any:
    def check(inst: Any, attribute: Any, value: Any) -> None:
        if value < lo or (hi is not None and value > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise ValueError(f"{camel(attribute.name)}: must be {bound}, got {value!r}")
    return check


def _policy(inst: Any, attribute: Any, value: str) -> None:
    if value not in POLICIES:
        raise ValueError(f"policy: must be one of {', '.join(POLICIES)}, got {value!r}")


@attrs.frozen
class Args:
    """NodeSLO ``spec.cpuBurstStrategy`` (``cpu-burst-config``): Koordinator's names, defaults
    (``DefaultCPUBurstStrategy``) and validation tags (``cpuBurstPercent`` 1..10000,
    ``cfsQuotaBurstPercent`` ≥ 100, ``cfsQuotaBurstPeriodSeconds`` ≥ -1, ``sharePoolThresholdPercent``
    0..100)."""

    policy: str = attrs.field(default=POLICY_NONE, validator=_policy)
    cpu_burst_percent: int = attrs.field(default=1000, validator=_range(1, 10000))
    cfs_quota_burst_percent: int = attrs.field(default=300, validator=_range(100, None))
    cfs_quota_burst_period_seconds: int = attrs.field(default=-1, validator=_range(-1, None))
    share_pool_threshold_percent: int = attrs.field(default=50, validator=_range(0, 100))

    def burst_config(self) -> BurstConfig:
        return BurstConfig(self.policy, self.cpu_burst_percent, self.cfs_quota_burst_percent,
                           self.cfs_quota_burst_period_seconds)


@attrs.frozen
class BurstConfig:
    """Koordinator's ``CPUBurstConfig`` as one pod sees it: ``None`` is a nil pointer. Not validated: a
    pod annotation is not (Koordinator's ``GetPodCPUBurstConfig`` only unmarshals it)."""

    policy: str = POLICY_NONE
    cpu_burst_percent: int | None = None
    cfs_quota_burst_percent: int | None = None
    cfs_quota_burst_period_seconds: int | None = None


_JSON_FIELDS = {"policy": "policy", "cpuBurstPercent": "cpu_burst_percent",
                "cfsQuotaBurstPercent": "cfs_quota_burst_percent",
                "cfsQuotaBurstPeriodSeconds": "cfs_quota_burst_period_seconds"}
_INT64 = (-(2**63), 2**63 - 1)


def parse_pod_config(raw: str) -> dict[str, Any]:
    """The annotation's JSON as Go's ``json.Unmarshal`` into ``CPUBurstConfig`` reads it: an object whose
    known keys (case-insensitive, as Go matches them; the last one wins) must be a string (``policy``) or
    an int64 (the percents; ``1.5``, ``1e3``, ``true`` are errors); ``null`` leaves the field unset; other
    keys are ignored. Returns the fields that are set. ``ValueError`` names the bad field."""
    obj = loads_json(raw)
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    out: dict[str, Any] = {}
    by_lower = {k.lower(): v for k, v in _JSON_FIELDS.items()}
    for key, value in obj.items():
        field = by_lower.get(key.lower()) if isinstance(key, str) else None
        if field is None:
            continue
        if value is None:
            out.pop(field, None)
            continue
        if field == "policy":
            if not isinstance(value, str):
                raise ValueError(f"{key}: expected a string, got {json.dumps(value)[:40]}")
        elif type(value) is not int or not (_INT64[0] <= value <= _INT64[1]):
            raise ValueError(f"{key}: expected an int64, got {json.dumps(value)[:40]}")
        out[field] = value
    return out


def merge_pod_config(node: BurstConfig | None, pod_fields: Mapping[str, Any] | None) -> BurstConfig | None:
    """``genPodBurstConfig``: the node's config, with each field the pod's annotation sets over it (Go
    marshals the pod's config with ``omitempty``, so an empty policy or an unset percent keeps the
    node's). ``pod_fields`` ``None``: the pod has no annotation."""
    if pod_fields is None:
        return node
    pod = BurstConfig(**{"policy": "", **pod_fields})
    if node is None:
        return pod
    changes = {f: v for f, v in pod_fields.items() if v is not None and not (f == "policy" and v == "")}
    return attrs.evolve(node, **changes)
