"""Gang definitions, parsed the way Koordinator's ``core/gang.go`` does (``tryInitByPodConfig`` /
``tryInitByPodGroup``), and the per-gang runtime state the plugin keeps.

Pure parsing lives here so it can be tested without a scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import structlog

from koordfw import parse_duration
from koordfw.extension import (
    ANNOTATION_BIND_GANG_GROUP_ID as ANNOTATION_BIND_GANG_GROUP_ID,
)
from koordfw.extension import (
    ANNOTATION_BIND_GANG_GROUP_ID_DEPRECATED as ANNOTATION_BIND_GANG_GROUP_ID_DEPRECATED,
)
from koordfw.extension import (
    ANNOTATION_BIND_GANG_MEMBER_COUNT as ANNOTATION_BIND_GANG_MEMBER_COUNT,
)
from koordfw.extension import (
    ANNOTATION_BIND_GANG_MEMBER_COUNT_DEPRECATED as ANNOTATION_BIND_GANG_MEMBER_COUNT_DEPRECATED,
)
from koordfw.extension import (
    ANNOTATION_GANG_GROUPS,
    ANNOTATION_GANG_MODE,
    ANNOTATION_GANG_NAME,
    ANNOTATION_GANG_PREFIX,
    LABEL_POD_GROUP,
    LABEL_POD_GROUP_DEPRECATED,
)
from koordfw.inputs import loads_json, shorten

log = structlog.get_logger("koordfw.gang")

# -- wire names (apis/extension/coscheduling.go, scheduler-plugins) -------------------------------------
# (the PodGroup labels, the gang prefix, name, mode, groups and the bind-gang-* annotations: koordfw.extension)
ANNOTATION_GANG_MIN_NUM = f"{ANNOTATION_GANG_PREFIX}/min-available"
ANNOTATION_GANG_TOTAL_NUM = f"{ANNOTATION_GANG_PREFIX}/total-number"
ANNOTATION_GANG_WAIT_TIME = f"{ANNOTATION_GANG_PREFIX}/waiting-time"
ANNOTATION_GANG_MATCH_POLICY = f"{ANNOTATION_GANG_PREFIX}/match-policy"
ANNOTATION_GANG_MATCH_POLICY_ALIAS = "pod-group.scheduling.sigs.k8s.io/match-policy"
ANNOTATION_GANG_TIMEOUT = f"{ANNOTATION_GANG_PREFIX}/timeout"


MODE_STRICT = "Strict"
MODE_NON_STRICT = "NonStrict"
MATCH_ONLY_WAITING = "only-waiting"
MATCH_WAITING_AND_RUNNING = "waiting-and-running"
MATCH_ONCE_SATISFIED = "once-satisfied"
MATCH_POLICIES = (MATCH_ONLY_WAITING, MATCH_WAITING_AND_RUNNING, MATCH_ONCE_SATISFIED)

DEFAULT_TIMEOUT_SECONDS = 600.0
#: minMember, scheduleTimeoutSeconds, min-available and total-number are int32 in Koordinator's API
INT32_MAX = 2**31 - 1

def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` in seconds; raises ``ValueError`` for anything Go would reject."""
    if not isinstance(text, str):
        raise ValueError(f"invalid duration {text!r}")
    return parse_duration(text)


def gang_name_of(pod: Any) -> str:
    """The gang name in Koordinator's lookup order (PodGroup label, deprecated label, annotation); ``""``
    for a pod without a gang."""
    return (pod.labels.get(LABEL_POD_GROUP) or pod.labels.get(LABEL_POD_GROUP_DEPRECATED)
            or pod.annotations.get(ANNOTATION_GANG_NAME) or "")


def is_crd_gang(pod: Any) -> bool:
    """A gang defined by a PodGroup object (the name came from a label), not by pod annotations."""
    return bool(pod.labels.get(LABEL_POD_GROUP) or pod.labels.get(LABEL_POD_GROUP_DEPRECATED))


def gang_id_of(pod: Any) -> str:
    name = gang_name_of(pod)
    return f"{pod.namespace}/{name}" if name else ""


def group_id_of(groups: tuple[str, ...]) -> str:
    """GangGroupId: the sorted gang ids joined by ``,``."""
    return ",".join(sorted(groups))


@attrs.frozen
class GangSpec:
    """What defines a gang. ``groups`` always contains the gang's own id."""

    gang_id: str
    min_member: int
    total_number: int
    mode: str = MODE_STRICT
    wait_seconds: float = DEFAULT_TIMEOUT_SECONDS
    groups: tuple[str, ...] = ()
    match_policy: str = MATCH_ONCE_SATISFIED
    source: str = "annotations"  # or "PodGroup"

    @property
    def group_id(self) -> str:
        return group_id_of(self.groups)


class GangDefinitionError(ValueError):
    """The gang cannot initialise (its min-available is missing or not an integer)."""


def _parse_int(value: object) -> int | None:
    """An int32 (an int, or a string of one as annotations carry it); ``None`` for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 12:
            return None
        try:
            value = int(text)
        except ValueError:
            return None
    if isinstance(value, int) and -INT32_MAX - 1 <= value <= INT32_MAX:
        return value
    return None


def _groups(raw: str, gang_id: str) -> list[str]:
    """The ``groups`` annotation (a JSON list of gang ids); an unreadable one is logged and ignored, as
    Koordinator does, leaving the gang its own group."""
    try:
        parsed = loads_json(raw)
        if not isinstance(parsed, list) or not all(isinstance(g, str) and g for g in parsed):
            raise ValueError("expected a JSON list of gang ids")
    except ValueError as e:
        log.warning("ignoring invalid gang annotation", gang=gang_id, annotation=ANNOTATION_GANG_GROUPS,
                    error=str(e))
        return []
    return list(dict.fromkeys(parsed))


def _common(gang_id: str, min_member: int, ann: Mapping[str, str], wait: float | None, *,
            default_timeout: float, default_match_policy: str, source: str) -> GangSpec:
    total = _parse_int(ann.get(ANNOTATION_GANG_TOTAL_NUM))
    if total is None or total == 0 or total < min_member:
        total = min_member
    mode = ann.get(ANNOTATION_GANG_MODE)
    if mode not in (MODE_STRICT, MODE_NON_STRICT):
        mode = MODE_STRICT
    if wait is None or wait <= 0:
        wait = default_timeout
    groups: list[str] = []
    raw_groups = ann.get(ANNOTATION_GANG_GROUPS)
    if raw_groups:
        groups = _groups(raw_groups, gang_id)
    if gang_id not in groups:
        groups.append(gang_id)
    policy = ann.get(ANNOTATION_GANG_MATCH_POLICY) or ann.get(ANNOTATION_GANG_MATCH_POLICY_ALIAS)
    if policy not in MATCH_POLICIES:
        policy = default_match_policy
    return GangSpec(gang_id, min_member, total, mode, float(wait), tuple(sorted(groups)), policy, source)


def spec_from_pod(pod: Any, *, default_timeout: float = DEFAULT_TIMEOUT_SECONDS,
                  default_match_policy: str = MATCH_ONCE_SATISFIED) -> GangSpec:
    """``tryInitByPodConfig``: a gang from the annotations of one of its pods.

    Raises :class:`GangDefinitionError` when min-available is missing or not a non-negative integer.
    """
    gang_id = gang_id_of(pod)
    ann = pod.annotations
    raw_min = ann.get(ANNOTATION_GANG_MIN_NUM)
    if raw_min is None:
        raise GangDefinitionError(f"gang {gang_id}: pod {pod.key} has no annotation {ANNOTATION_GANG_MIN_NUM}")
    min_member = _parse_int(raw_min)
    if min_member is None or min_member < 0:
        raise GangDefinitionError(f"gang {gang_id}: pod {pod.key} has an invalid {ANNOTATION_GANG_MIN_NUM} "
                                  f"{shorten(raw_min)} (expected an integer in [0, {INT32_MAX}])")
    wait: float | None
    raw_wait = ann.get(ANNOTATION_GANG_WAIT_TIME)
    try:
        wait = parse_go_duration(raw_wait) if raw_wait else None
    except ValueError:
        wait = None
    return _common(gang_id, min_member, ann, wait, default_timeout=default_timeout,
                   default_match_policy=default_match_policy, source="annotations")


def spec_from_pod_group(gang_id: str, pg: Mapping[str, Any], *, default_timeout: float = DEFAULT_TIMEOUT_SECONDS,
                        default_match_policy: str = MATCH_ONCE_SATISFIED) -> GangSpec:
    """``tryInitByPodGroup``: ``spec.minMember``, ``spec.scheduleTimeoutSeconds`` and the PodGroup's
    annotations for total-number, mode, groups and match-policy.

    Raises :class:`GangDefinitionError` for a PodGroup whose ``spec.minMember`` is not a non-negative integer.
    """
    spec = pg.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise GangDefinitionError(f"PodGroup {gang_id}: spec: expected a mapping")
    raw_min = spec.get("minMember", 0)
    min_member = _parse_int(raw_min)
    if min_member is None or min_member < 0:
        raise GangDefinitionError(f"PodGroup {gang_id}: spec.minMember: expected an integer in [0, {INT32_MAX}], "
                                  f"got {shorten(raw_min)}")
    raw_wait = spec.get("scheduleTimeoutSeconds")
    wait = _parse_int(raw_wait)
    if raw_wait is not None and wait is None:
        raise GangDefinitionError(f"PodGroup {gang_id}: spec.scheduleTimeoutSeconds: expected an integer in "
                                  f"[0, {INT32_MAX}], got {shorten(raw_wait)}")
    meta = pg.get("metadata") or {}
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    ann = {str(k): str(v) for k, v in ann.items()} if isinstance(ann, Mapping) else {}
    return _common(gang_id, min_member, ann, float(wait) if wait is not None else None,
                   default_timeout=default_timeout, default_match_policy=default_match_policy, source="PodGroup")


@attrs.define(eq=False)
class Gang:
    """Runtime state of one gang (Koordinator's ``Gang`` in ``core/gang.go``).

    ``children``: every known pod of the gang (uid → pod); ``waiting``: members reserved and held at or
    past Permit, not yet bound (``WaitingForBindChildren``); ``bound``: bound members;
    ``once_satisfied``: set when any member binds (``OnceResourceSatisfied``).
    """

    gang_id: str
    spec: GangSpec | None = None
    error: str = ""
    children: dict[str, Any] = attrs.field(factory=dict)
    waiting: set[str] = attrs.field(factory=set)
    bound: set[str] = attrs.field(factory=set)
    once_satisfied: bool = False
    first_arrival: float | None = None

    @property
    def initialized(self) -> bool:
        return self.spec is not None

    def valid_for_permit(self) -> bool:
        """``isGangValidForPermit`` for this gang's match policy."""
        spec = self.spec
        if spec is None:
            return False
        if spec.match_policy == MATCH_ONLY_WAITING:
            return len(self.waiting) >= spec.min_member
        if spec.match_policy == MATCH_WAITING_AND_RUNNING:
            return len(self.waiting) + len(self.bound) >= spec.min_member
        return len(self.waiting) >= spec.min_member or self.once_satisfied

    @property
    def passes_once_satisfied(self) -> bool:
        """A once-satisfied gang that has already been satisfied lets late members through."""
        return self.spec is not None and self.spec.match_policy == MATCH_ONCE_SATISFIED and self.once_satisfied
