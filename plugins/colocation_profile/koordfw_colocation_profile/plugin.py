"""colocation_profile: Koordinator's pod admission webhooks for ClusterColocationProfiles.

``mutate_pod`` is ``PodMutatingHandler.handleCreate``'s ClusterColocationProfile and ExtendedResourceSpec
steps (``pkg/webhook/pod/mutating``); ``validate_pod`` is ``clusterColocationProfileValidatingPod``
(``pkg/webhook/pod/validating``). The args are Koordinator's feature gates of these steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import structlog

from koordfw import AdmissionHandle, StashKey, hookimpl
from koordfw.extension import (
    BATCH_CPU,
    BATCH_MEMORY,
    CONFIG_GROUP_VERSION,
    KIND_CLUSTER_COLOCATION_PROFILE,
    LABEL_POD_PRIORITY,
    LABEL_POD_QOS,
    PRIORITY_BATCH,
    PRIORITY_FREE,
    PRIORITY_MID,
    PRIORITY_NONE,
    PRIORITY_PROD,
    QOS_BE,
    QOS_LSE,
    QOS_LSR,
    SCHEDULING_K8S_GROUP_VERSION,
)

from .podspec import (
    convert_resources,
    mentions,
    pod_priority_class_raw,
    pod_qos_raw,
    pod_requests,
    set_extended_resource_spec,
)
from .profile import ColocationProfile, SelectorError, parse_profile, probability_percent, selector_matches
from .smp import PatchError, strategic_merge_pod

log = structlog.get_logger("koordfw.colocation_profile")

__all__ = ["ColocationProfileArgs", "mutate_pod", "plugin_args", "validate_pod"]


@attrs.frozen
class ColocationProfileArgs:
    #: Koordinator's ColocationProfileSkipMutatingResources gate: never convert cpu/memory to batch/mid
    skip_mutating_resources: bool = False
    #: Koordinator's ColocationProfileSkipValidatingPriority gate: ``koordinator.sh/priority`` may change on update
    skip_validating_priority: bool = False
    #: Koordinator's DisableExtendedResourceSpec gate: do not write the extended-resource-spec annotation
    disable_extended_resource_spec: bool = False


@hookimpl
def plugin_args() -> type:
    return ColocationProfileArgs


# -- mutating ----------------------------------------------------------------------------------------


def _matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str], profile: str, field: str) -> bool:
    if selector is None:
        return True
    try:
        return selector_matches(selector, labels)
    except SelectorError as e:
        # Koordinator skips a profile only when its selector evaluates to "no match" without an error
        log.warning("invalid selector: the profile applies", profile=profile, field=field, error=str(e))
        return True


def _namespace_matches(profile: ColocationProfile, namespace: Mapping[str, Any] | None) -> bool:
    sel = profile.namespace_selector
    if sel is None or (not sel.get("matchLabels") and not sel.get("matchExpressions")):
        return True
    if namespace is None:
        # Koordinator: a failed Namespace lookup does not skip the profile
        log.warning("namespace not found: the profile applies", profile=profile.name)
        return True
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    return _matches(sel, labels, profile.name, "spec.namespaceSelector")


def _skipped(profile: ColocationProfile, handle: AdmissionHandle) -> bool:
    """shouldSkipProfile: probability 0 never applies; 100 (the default) always; otherwise the profile is
    skipped when a draw from [0, 100) exceeds it (Koordinator's ``rand.Intn(100) > percent``)."""
    percent = 100 if profile.probability is None else probability_percent(profile.probability, profile.name)
    return percent == 0 or (percent != 100 and int(handle.rng.integers(100)) > percent)


def _apply(pod: dict[str, Any], profile: ColocationProfile, handle: AdmissionHandle) -> dict[str, Any]:
    """doMutateByColocationProfile, in Koordinator's order."""
    meta = pod.setdefault("metadata", {})
    spec = pod.setdefault("spec", {})

    def labels() -> dict[str, Any]:
        if not isinstance(meta.get("labels"), dict):
            meta["labels"] = {}
        return meta["labels"]

    def annotations() -> dict[str, Any]:
        if not isinstance(meta.get("annotations"), dict):
            meta["annotations"] = {}
        return meta["annotations"]

    if profile.labels:
        labels().update(profile.labels)
    if profile.pod_annotations:
        annotations().update(profile.pod_annotations)
    if profile.label_keys_mapping:
        ls = labels()
        for old, new in profile.label_keys_mapping.items():
            ls[new] = ls.get(old, "")
    if profile.annotation_keys_mapping:
        anns = annotations()
        for old, new in profile.annotation_keys_mapping.items():
            anns[new] = anns.get(old, "")
    if profile.label_suffixes:
        ls = labels()
        for key, suffix in profile.label_suffixes.items():
            if key in ls:
                ls[key] = f"{ls[key]}{suffix}"
    if profile.scheduler_name:
        spec["schedulerName"] = profile.scheduler_name
    if profile.qos_class:
        labels()[LABEL_POD_QOS] = profile.qos_class
    if profile.priority_class_name:
        pc = handle.get(SCHEDULING_K8S_GROUP_VERSION, "PriorityClass", profile.priority_class_name)
        if pc is None:
            raise LookupError(f"{KIND_CLUSTER_COLOCATION_PROFILE} {profile.name}: spec.priorityClassName: "
                              f'priorityclasses.scheduling.k8s.io "{profile.priority_class_name}" not found')
        spec["priorityClassName"] = profile.priority_class_name
        spec["priority"] = pc.get("value", 0)
        if pc.get("preemptionPolicy") is not None:
            spec["preemptionPolicy"] = pc["preemptionPolicy"]
        else:
            spec.pop("preemptionPolicy", None)
    if profile.koordinator_priority is not None:
        labels()[LABEL_POD_PRIORITY] = str(profile.koordinator_priority)
    if profile.patch is not None:
        try:
            pod = strategic_merge_pod(pod, profile.patch)
        except PatchError as e:
            raise ValueError(f"{KIND_CLUSTER_COLOCATION_PROFILE} {profile.name}: spec.patch: {e}") from None
    return pod


#: profile name -> (the profile object, its parse), in the plugin's stash (one per engine): the engine hands
#: out the same dicts until they change, so a parse is reused while its entry holds that very object. Only
#: the objects of the last call are kept
_PARSED = StashKey[dict[str, tuple[Mapping[str, Any], ColocationProfile]]]()


def _profiles(handle: AdmissionHandle) -> list[ColocationProfile]:
    out = []
    objs = handle.objects(CONFIG_GROUP_VERSION, KIND_CLUSTER_COLOCATION_PROFILE)
    before = handle.stash.get(_PARSED, None) or {}
    now: dict[str, tuple[Mapping[str, Any], ColocationProfile]] = {}
    for o in objs:
        meta = o.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        hit = before.get(name) if isinstance(name, str) else None
        if hit is None or hit[0] is not o:
            hit = (o, parse_profile(o))
        if isinstance(name, str):
            now[name] = hit
        out.append(hit[1])
    handle.stash[_PARSED] = now
    return out


def apply_profiles(pod: dict[str, Any], namespace: Mapping[str, Any] | None, profiles: list[ColocationProfile],
                   handle: AdmissionHandle, args: ColocationProfileArgs) -> dict[str, Any]:
    """clusterColocationProfileMutatingPod: every matching profile in name order (each drawn against its
    probability), then the batch/mid resource conversion unless a matching profile (or the args) say skip."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    matched = [p for p in profiles if _namespace_matches(p, namespace)
               and _matches(p.selector, labels, p.name, "spec.selector")]
    if not matched:
        return pod
    skip_resources = args.skip_mutating_resources
    for profile in sorted(matched, key=lambda p: p.name):
        skip_resources = skip_resources or profile.skip_update_resources
        if _skipped(profile, handle):
            continue
        pod = _apply(pod, profile, handle)
    if not skip_resources:
        convert_resources(pod)
    return pod


@hookimpl
def mutate_pod(pod: dict[str, Any], operation: str, namespace: dict[str, Any] | None, args: ColocationProfileArgs,
               handle: AdmissionHandle) -> dict[str, Any] | None:
    # PodMutatingHandler.handleCreate; its handleUpdate changes nothing (so neither step runs on UPDATE)
    if operation != "CREATE":
        return None
    pod = apply_profiles(pod, namespace, _profiles(handle), handle, args)
    if not args.disable_extended_resource_spec:
        set_extended_resource_spec(pod)
    return pod


# -- validating --------------------------------------------------------------------------------------


def _invalid(field: str, value: str, detail: str) -> str:
    """field.Invalid(...).Error() for a string value."""
    return f"{field}: Invalid value: {_go_quote(value)}: {detail}"


def _go_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


_LABEL_QOS_FIELD = f"labels.{LABEL_POD_QOS}"
_LABEL_PRIORITY_FIELD = f"labels.{LABEL_POD_PRIORITY}"
#: forbidSpecialQoSClassAndPriorityClass: (QoS class, the priority classes it must not come with)
_FORBIDDEN = ((QOS_BE, (PRIORITY_NONE, PRIORITY_PROD)), (QOS_LSR, (PRIORITY_NONE, PRIORITY_MID, PRIORITY_BATCH,
                                                                     PRIORITY_FREE)))


def _cpu_string(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def validation_errors(pod: Mapping[str, Any], old: Mapping[str, Any] | None, operation: str,
                      args: ColocationProfileArgs) -> list[str]:
    """The field errors of clusterColocationProfileValidatingPod, in Koordinator's order."""
    errs: list[str] = []
    if operation == "UPDATE" and old is not None:
        qos, old_qos = pod_qos_raw(pod), pod_qos_raw(old)
        if qos != old_qos:
            errs.append(_invalid(_LABEL_QOS_FIELD, qos, "field is immutable"))
        pc, old_pc = pod_priority_class_raw(pod), pod_priority_class_raw(old)
        if pc != old_pc:
            errs.append(_invalid("spec.priority", pc, "field is immutable"))
        if not args.skip_validating_priority:
            prio = str(((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_POD_PRIORITY, ""))
            old_prio = str(((old.get("metadata") or {}).get("labels") or {}).get(LABEL_POD_PRIORITY, ""))
            if prio != old_prio:
                errs.append(_invalid(_LABEL_PRIORITY_FIELD, prio, "field is immutable"))
    qos = pod_qos_raw(pod)
    # the requests are summed only when a check needs them (parsing every quantity of every pod is costly)
    requests = pod_requests(pod) if (qos in (QOS_LSR, QOS_LSE) or mentions(pod, (BATCH_CPU, BATCH_MEMORY))) else {}
    if (requests.get(BATCH_CPU, 0) or requests.get(BATCH_MEMORY, 0)) and qos != QOS_BE:
        errs.append(f"{_LABEL_QOS_FIELD}: Required value: must specify koordinator QoS BE with koordinator "
                    "colocation resources")
    pc = pod_priority_class_raw(pod)
    for q, classes in _FORBIDDEN:
        if qos == q and pc in classes:
            errs.append(f"Pod: Forbidden: {LABEL_POD_QOS}={q} and priorityClass={pc} cannot be used in combination")
    if qos in (QOS_LSR, QOS_LSE):
        cpu = requests.get("cpu", 0)
        field = "pod.spec.containers[*].resources.requests"
        if cpu == 0:
            errs.append(f"{field}: Required value: LSR Pod must declare the requested CPUs")
        elif cpu % 1000:
            errs.append(_invalid(field, _cpu_string(cpu), "the requested CPUs of LSR Pod must be integer"))
    return errs


def aggregate(errs: list[str]) -> str:
    """apimachinery's ``utilerrors.NewAggregate(errs).Error()``: one message alone, several in brackets."""
    seen: list[str] = []
    for e in errs:
        if e not in seen:
            seen.append(e)
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


@hookimpl
def validate_pod(pod: dict[str, Any], old: dict[str, Any] | None, operation: str, args: ColocationProfileArgs
                 ) -> str | None:
    if operation not in ("CREATE", "UPDATE"):
        return None
    errs = validation_errors(pod, old, operation, args)
    return aggregate(errs) if errs else None
