"""mypy checks that every built-in plugin satisfies the Protocols of its kinds (koordfw.core.contract):
each assignment below is checked, none runs. ``tests/kernel/test_contract.py`` checks the installed plugins
(built-ins and plugin packages) at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import (
        BindPlugin,
        EnqueueExtensions,
        FilterPlugin,
        PluginArgsProvider,
        PostFilterPlugin,
        PreBindPlugin,
        PreEnqueuePlugin,
        PreFilterPlugin,
        PreScorePlugin,
        QueueSortPlugin,
        ReservePlugin,
        ScoreExtensions,
        ScorePlugin,
        UnreservePlugin,
    )

    from . import (
        default_binder,
        default_preemption,
        node_resources_balanced_allocation,
        node_resources_fit,
        node_selector,
        node_unschedulable,
        priority_sort,
        scheduling_gates,
        scheduling_hint,
    )
    from .image_locality import ImageLocality
    from .inter_pod_affinity import InterPodAffinity
    from .node_ports import NodePorts
    from .node_volume_limits import NodeVolumeLimits
    from .pod_topology_spread import PodTopologySpread
    from .taint_toleration import TaintToleration
    from .volume_binding import VolumeBinding
    from .volume_restrictions import VolumeRestrictions
    from .volume_zone import VolumeZone

    def _builtins_are_their_kinds(
        taint_toleration_: TaintToleration,
        node_ports_: NodePorts,
        volume_restrictions_: VolumeRestrictions,
        node_volume_limits_: NodeVolumeLimits,
        volume_binding_: VolumeBinding,
        volume_zone_: VolumeZone,
        pod_topology_spread_: PodTopologySpread,
        inter_pod_affinity_: InterPodAffinity,
        image_locality_: ImageLocality,
    ) -> None:
        _queue_sort_priority_sort: QueueSortPlugin = priority_sort
        _pre_enqueue_scheduling_gates: PreEnqueuePlugin = scheduling_gates
        _plugin_args_scheduling_hint: PluginArgsProvider = scheduling_hint
        _pre_filter_scheduling_hint: PreFilterPlugin = scheduling_hint
        _events_to_register_node_unschedulable: EnqueueExtensions = node_unschedulable
        _filter_node_unschedulable: FilterPlugin = node_unschedulable
        _events_to_register_node_selector: EnqueueExtensions = node_selector
        _pre_filter_node_selector: PreFilterPlugin = node_selector
        _filter_node_selector: FilterPlugin = node_selector
        _pre_score_node_selector: PreScorePlugin = node_selector
        _score_node_selector: ScorePlugin = node_selector
        _normalize_score_node_selector: ScoreExtensions = node_selector
        _events_to_register_taint_toleration: EnqueueExtensions = taint_toleration_
        _filter_taint_toleration: FilterPlugin = taint_toleration_
        _pre_score_taint_toleration: PreScorePlugin = taint_toleration_
        _score_taint_toleration: ScorePlugin = taint_toleration_
        _normalize_score_taint_toleration: ScoreExtensions = taint_toleration_
        _events_to_register_node_ports: EnqueueExtensions = node_ports_
        _pre_filter_node_ports: PreFilterPlugin = node_ports_
        _filter_node_ports: FilterPlugin = node_ports_
        _plugin_args_node_resources_fit: PluginArgsProvider = node_resources_fit
        _plugin_args_node_resources_balanced_allocation: PluginArgsProvider = node_resources_balanced_allocation
        _score_node_resources_balanced_allocation: ScorePlugin = node_resources_balanced_allocation
        _events_to_register_node_resources_fit: EnqueueExtensions = node_resources_fit
        _filter_node_resources_fit: FilterPlugin = node_resources_fit
        _score_node_resources_fit: ScorePlugin = node_resources_fit
        _events_to_register_volume_restrictions: EnqueueExtensions = volume_restrictions_
        _pre_filter_volume_restrictions: PreFilterPlugin = volume_restrictions_
        _filter_volume_restrictions: FilterPlugin = volume_restrictions_
        _events_to_register_node_volume_limits: EnqueueExtensions = node_volume_limits_
        _pre_filter_node_volume_limits: PreFilterPlugin = node_volume_limits_
        _filter_node_volume_limits: FilterPlugin = node_volume_limits_
        _events_to_register_volume_binding: EnqueueExtensions = volume_binding_
        _pre_filter_volume_binding: PreFilterPlugin = volume_binding_
        _filter_volume_binding: FilterPlugin = volume_binding_
        _reserve_volume_binding: ReservePlugin = volume_binding_
        _unreserve_volume_binding: UnreservePlugin = volume_binding_
        _pre_bind_volume_binding: PreBindPlugin = volume_binding_
        _events_to_register_volume_zone: EnqueueExtensions = volume_zone_
        _pre_filter_volume_zone: PreFilterPlugin = volume_zone_
        _filter_volume_zone: FilterPlugin = volume_zone_
        _plugin_args_pod_topology_spread: PluginArgsProvider = pod_topology_spread_
        _events_to_register_pod_topology_spread: EnqueueExtensions = pod_topology_spread_
        _pre_filter_pod_topology_spread: PreFilterPlugin = pod_topology_spread_
        _filter_pod_topology_spread: FilterPlugin = pod_topology_spread_
        _pre_score_pod_topology_spread: PreScorePlugin = pod_topology_spread_
        _score_pod_topology_spread: ScorePlugin = pod_topology_spread_
        _normalize_score_pod_topology_spread: ScoreExtensions = pod_topology_spread_
        _plugin_args_inter_pod_affinity: PluginArgsProvider = inter_pod_affinity_
        _events_to_register_inter_pod_affinity: EnqueueExtensions = inter_pod_affinity_
        _pre_filter_inter_pod_affinity: PreFilterPlugin = inter_pod_affinity_
        _filter_inter_pod_affinity: FilterPlugin = inter_pod_affinity_
        _pre_score_inter_pod_affinity: PreScorePlugin = inter_pod_affinity_
        _score_inter_pod_affinity: ScorePlugin = inter_pod_affinity_
        _normalize_score_inter_pod_affinity: ScoreExtensions = inter_pod_affinity_
        _pre_score_image_locality: PreScorePlugin = image_locality_
        _score_image_locality: ScorePlugin = image_locality_
        _plugin_args_default_preemption: PluginArgsProvider = default_preemption
        _post_filter_default_preemption: PostFilterPlugin = default_preemption
        _bind_default_binder: BindPlugin = default_binder
