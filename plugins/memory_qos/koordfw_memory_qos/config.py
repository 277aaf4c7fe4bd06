"""The plugin's args (Koordinator's NodeSLO ``resourceQOSStrategy.<class>.memoryQOS``) and the pod-level policy.

Profile form (camelCase keys, Koordinator's field names)::

    pluginConfig:
      memory_qos:
        lsrClass: {enable: true, minLimitPercent: 100, lowLimitPercent: 0, throttlingPercent: 80}
        lsClass:  {enable: true, wmarkRatio: 95}
        beClass:  {enable: true, wmarkMinAdj: 50}
        systemClass: {enable: false}

How a class's settings are found (koordlet's ``mergeSLOSpecResourceQOSStrategy`` then
``mergeNoneMemoryQOSIfDisabled``): the fields given override Koordinator's defaults for the class
(``sloconfig.DefaultMemoryQOS``); with ``enable`` false (the default) the class gets ``NoneMemoryQOS``
instead, every knob at its kernel default.

The pod annotation ``koordinator.sh/memoryQOS`` (``PodMemoryQOSConfig``: ``policy`` plus the same fields,
``cgreconcile.mergePodResourceQoSForMemoryQoS``): ``policy: none`` gives the pod ``NoneMemoryQOS``;
``policy: auto`` starts from the class's *defaults* (whether or not the node enables the class);
``default`` (or no policy) starts from the node's class settings; then the annotation's fields override.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from koordfw.extension import QOS_BE, QOS_LS, QOS_LSE, QOS_LSR, QOS_SYSTEM
from koordfw.inputs import loads_json

#: the knobs of Koordinator's ``MemoryQOS`` (page cache limit aside), in its field order, with the
#: ranges of its API validation (``validate:"omitempty,min=..,max=.."``)
FIELDS: tuple[tuple[str, str, int, int], ...] = (
    ("min_limit_percent", "minLimitPercent", 0, 100),
    ("low_limit_percent", "lowLimitPercent", 0, 100),
    ("throttling_percent", "throttlingPercent", 0, 100),
    ("wmark_ratio", "wmarkRatio", 0, 100),
    ("wmark_scale_permill", "wmarkScalePermill", 1, 1000),
    ("wmark_min_adj", "wmarkMinAdj", -25, 50),
    ("priority_enable", "priorityEnable", 0, 1),
    ("priority", "priority", 0, 12),
    ("oom_kill_group", "oomKillGroup", 0, 1),
)
_RANGES = {name: (lo, hi) for name, _, lo, hi in FIELDS}
_WIRE = {name: wire for name, wire, _, _ in FIELDS}

POLICY_DEFAULT, POLICY_NONE, POLICY_AUTO = "default", "none", "auto"


class InvalidArg(TypeError):
    """A bad arg value. A TypeError so that cattrs' error report keeps the message (it reduces a
    ValueError raised in ``__init__`` to "invalid value")."""


def _opt_bool(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not isinstance(value, bool):
        raise InvalidArg(f"enable must be true or false, got {value!r}")


def _ranged(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    lo, hi = _RANGES[attribute.name]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidArg(f"{_WIRE[attribute.name]} must be an integer in [{lo}, {hi}], got {value!r}")


@attrs.frozen
class Settings:
    """A class's (or a pod's) memory QoS with every knob known (Koordinator's ``MemoryQOS``)."""

    min_limit_percent: int
    low_limit_percent: int
    throttling_percent: int
    wmark_ratio: int
    wmark_scale_permill: int
    wmark_min_adj: int
    priority_enable: int
    priority: int
    oom_kill_group: int

    def merged(self, overrides: Mapping[str, int]) -> Settings:
        """These settings with ``overrides`` (Python field name → value) applied (``util.MergeCfg``)."""
        return attrs.evolve(self, **dict(overrides)) if overrides else self


def _settings(*values: int) -> Settings:
    return Settings(*values)


#: sloconfig.NoneMemoryQOS: every knob at the kernel's default
NONE = _settings(0, 0, 0, 0, 50, 0, 0, 0, 0)
#: sloconfig.DefaultMemoryQOS per Koordinator QoS class (LSE uses LSR's)
DEFAULTS: dict[str, Settings] = {
    QOS_LSR: _settings(0, 0, 0, 95, 20, -25, 0, 0, 0),
    QOS_LS: _settings(0, 0, 0, 95, 20, -25, 0, 0, 0),
    QOS_BE: _settings(0, 0, 0, 95, 20, 50, 0, 0, 0),
    QOS_SYSTEM: _settings(0, 0, 0, 0, 50, 0, 0, 0, 0),
}


@attrs.frozen
class MemoryQOS:
    """Koordinator's ``MemoryQOSCfg`` of one class. ``None`` = the class default."""

    enable: bool | None = attrs.field(default=None, validator=_opt_bool)
    min_limit_percent: int | None = attrs.field(default=None, validator=_ranged)
    low_limit_percent: int | None = attrs.field(default=None, validator=_ranged)
    throttling_percent: int | None = attrs.field(default=None, validator=_ranged)
    wmark_ratio: int | None = attrs.field(default=None, validator=_ranged)
    wmark_scale_permill: int | None = attrs.field(default=None, validator=_ranged)
    wmark_min_adj: int | None = attrs.field(default=None, validator=_ranged)
    priority_enable: int | None = attrs.field(default=None, validator=_ranged)
    priority: int | None = attrs.field(default=None, validator=_ranged)
    oom_kill_group: int | None = attrs.field(default=None, validator=_ranged)

    def given(self) -> dict[str, int]:
        """The knobs set (Python field name → value)."""
        return {name: v for name, *_ in FIELDS if (v := getattr(self, name)) is not None}


#: the resourceQOSStrategy class key of each Koordinator QoS class (LSE shares LSR's, as in
#: helpers.GetPodResourceQoSByQoSClass)
CLASS_KEYS = {QOS_LSE: "lsr_class", QOS_LSR: "lsr_class", QOS_LS: "ls_class", QOS_BE: "be_class",
              QOS_SYSTEM: "system_class"}
#: the kube QoS level → the class whose priority knobs its QoS cgroup gets
#: (helpers.GetKubeQoSResourceQoSByQoSClass)
KUBE_QOS_CLASS = {"Guaranteed": QOS_LSR, "Burstable": QOS_LS, "BestEffort": QOS_BE}


@attrs.frozen
class MemoryQOSArgs:
    """Args of ``memory_qos``: ``resourceQOSStrategy``'s classes, each a ``memoryQOS`` mapping."""

    lsr_class: MemoryQOS = attrs.field(factory=MemoryQOS)
    ls_class: MemoryQOS = attrs.field(factory=MemoryQOS)
    be_class: MemoryQOS = attrs.field(factory=MemoryQOS)
    system_class: MemoryQOS = attrs.field(factory=MemoryQOS)

    def class_settings(self, qos: str) -> Settings:
        """The node-level settings of a Koordinator QoS class: its defaults overridden by the fields
        given, or NoneMemoryQOS when the class is not enabled."""
        base = QOS_LSR if qos == QOS_LSE else qos
        cfg: MemoryQOS = getattr(self, CLASS_KEYS.get(base, "lsr_class"))
        if not cfg.enable:
            return NONE
        return DEFAULTS.get(base, NONE).merged(cfg.given())


@attrs.frozen
class PodPolicy:
    """A parsed ``koordinator.sh/memoryQOS`` annotation."""

    policy: str = POLICY_DEFAULT
    overrides: Mapping[str, int] = attrs.field(factory=dict)


def parse_pod_policy(raw: str) -> PodPolicy:
    """``PodMemoryQOSConfig`` from the annotation's JSON; ``ValueError`` (naming the field) for JSON that is
    not an object, a policy that is not a string or a knob that is not an integer within its API range.
    Unknown keys are ignored, as Go's json.Unmarshal does; ``null`` is an unset knob."""
    obj = loads_json(raw)
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object")
    policy = obj.get("policy")
    if policy is None:
        policy = ""
    if not isinstance(policy, str):
        raise ValueError(f"policy: expected a string, got {policy!r}")
    overrides: dict[str, int] = {}
    for name, wire, lo, hi in FIELDS:
        v = obj.get(wire)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError(f"{wire}: expected an integer in [{lo}, {hi}], got {v!r}")
        overrides[name] = v
    return PodPolicy(policy=policy or POLICY_DEFAULT, overrides=overrides)


def pod_settings(args: MemoryQOSArgs, qos: str, policy: PodPolicy | None) -> Settings:
    """A pod's merged memory QoS (cgreconcile.getMergedPodResourceQoS): pod-level config > the policy's
    template > the node's class settings."""
    node = args.class_settings(qos)
    if policy is None:
        return node
    if policy.policy == POLICY_NONE:
        return NONE
    if policy.policy == POLICY_AUTO:
        base = QOS_LSR if qos == QOS_LSE else qos
        node = DEFAULTS.get(base, NONE)
    return node.merged(policy.overrides)
