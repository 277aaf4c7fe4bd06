"""Koordinator and Kubernetes wire names shared by the kernel and the plugins (public API).

The one home of every label, annotation, resource name and API version that more than one module uses,
as Koordinator's ``apis/extension`` is for Go. The strings are Koordinator's verbatim; the names are its Go
constant names in UPPER_SNAKE (``LabelPodQoS`` -> ``LABEL_POD_QOS``). A name only one plugin uses stays in
that plugin. This module imports nothing of koordfw, so the kernel and plugins alike may import it.
"""

from __future__ import annotations

from types import MappingProxyType as _MappingProxyType

__all__ = [
    "ANNOTATION_GANG_MODE", "ANNOTATION_GANG_NAME", "ANNOTATION_GANG_PREFIX", "ANNOTATION_NODE_RAW_ALLOCATABLE",
    "ANNOTATION_NODE_RESERVATION", "ANNOTATION_NODE_SYSTEM_QOS_RESOURCE", "ANNOTATION_RESOURCE_STATUS",
    "BATCH_CPU", "BATCH_MEMORY", "LABEL_POD_GROUP", "LABEL_POD_GROUP_DEPRECATED", "LABEL_POD_PRIORITY",
    "LABEL_POD_PRIORITY_CLASS", "LABEL_POD_QOS", "MID_CPU", "MID_MEMORY", "PRIORITY_BATCH", "PRIORITY_CLASSES",
    "PRIORITY_FREE", "PRIORITY_MID", "PRIORITY_NONE", "PRIORITY_PROD", "QOS_BE", "QOS_CLASSES", "QOS_LS",
    "QOS_LSE", "QOS_LSR", "QOS_NONE", "QOS_SYSTEM", "RESOURCE_GPU", "RESOURCE_GPU_CORE", "RESOURCE_GPU_MEMORY",
    "RESOURCE_GPU_MEMORY_RATIO", "RESOURCE_GPU_SHARED", "SCHEDULING_GROUP_VERSION", "SLO_GROUP_VERSION",
    "COLOCATION_CONFIG_KEY", "CONFIG_NAMESPACE", "SLO_CTRL_CONFIG_MAP",
    "RESOURCE_HUAWEI_NPU_CORE", "RESOURCE_HUAWEI_NPU_CPU", "RESOURCE_HUAWEI_NPU_DVPP",
    "NODE_METRIC_PROD_USAGE_DISTRIBUTION",
]

# -- pod labels (apis/extension/constants.go) --------------------------------------------------------
LABEL_POD_QOS = "koordinator.sh/qosClass"
LABEL_POD_PRIORITY_CLASS = "koordinator.sh/priority-class"
LABEL_POD_PRIORITY = "koordinator.sh/priority"

# -- QoS classes (apis/extension/qos.go) ---------------------------------------------------------------
QOS_LSE, QOS_LSR, QOS_LS, QOS_BE, QOS_SYSTEM, QOS_NONE = "LSE", "LSR", "LS", "BE", "SYSTEM", ""
#: the valid values of :data:`LABEL_POD_QOS` (``QoSNone`` is the absence of one)
QOS_CLASSES = (QOS_LSE, QOS_LSR, QOS_LS, QOS_BE, QOS_SYSTEM)

# -- priority classes (apis/extension/priority.go) ----------------------------------------------------
PRIORITY_PROD, PRIORITY_MID, PRIORITY_BATCH, PRIORITY_FREE, PRIORITY_NONE = (
    "koord-prod", "koord-mid", "koord-batch", "koord-free", "")
#: the named priority classes (``PriorityNone`` is the absence of one)
PRIORITY_CLASSES = (PRIORITY_PROD, PRIORITY_MID, PRIORITY_BATCH, PRIORITY_FREE)

# -- batch and mid resources, pod resource annotations (apis/extension/resource.go) -------------------
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
MID_CPU = "kubernetes.io/mid-cpu"
MID_MEMORY = "kubernetes.io/mid-memory"
ANNOTATION_RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"

# -- node annotations (apis/extension/node.go, node_resource_amplification.go) ------------------------
ANNOTATION_NODE_RESERVATION = "node.koordinator.sh/reservation"
ANNOTATION_NODE_SYSTEM_QOS_RESOURCE = "node.koordinator.sh/system-qos-resource"
ANNOTATION_NODE_RAW_ALLOCATABLE = "node.koordinator.sh/raw-allocatable"  # node_resource_amplification.go
#: the node's resource amplification ratios, a JSON map resource -> ratio with two decimals (node_resource_amplification.go)
ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO = "node.koordinator.sh/resource-amplification-ratio"
#: "true"/"false" on a node overrides the cpu normalization strategy's ``enable`` (cpu_normalization.go)
LABEL_CPU_NORMALIZATION_ENABLED = "node.koordinator.sh/cpu-normalization-enabled"  # LabelCPUNormalizationEnabled
__all__ += ["ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO", "LABEL_CPU_NORMALIZATION_ENABLED"]

# -- what the node agent reports on the NodeResourceTopology (apis/extension/numa_aware.go,
# cpu_normalization.go, constants.go; koordlet's states_noderesourcetopology.go writes them) ---------------
ANNOTATION_NODE_CPU_TOPOLOGY = "node.koordinator.sh/cpu-topology"  # AnnotationNodeCPUTopology
ANNOTATION_NODE_CPU_ALLOCS = "node.koordinator.sh/pod-cpu-allocs"  # AnnotationNodeCPUAllocs
ANNOTATION_NODE_CPU_SHARED_POOLS = "node.koordinator.sh/cpu-shared-pools"  # AnnotationNodeCPUSharedPools
ANNOTATION_NODE_BE_CPU_SHARED_POOLS = "node.koordinator.sh/be-cpu-shared-pools"  # AnnotationNodeBECPUSharedPools
ANNOTATION_KUBELET_CPU_MANAGER_POLICY = "kubelet.koordinator.sh/cpu-manager-policy"  # AnnotationKubeletCPUManagerPolicy
ANNOTATION_CPU_BASIC_INFO = "node.koordinator.sh/cpu-basic-info"  # AnnotationCPUBasicInfo
#: the node's CPU normalization ratio (koord-manager writes it; koordlet's BatchResource hook scales BE quotas by it)
ANNOTATION_CPU_NORMALIZATION_RATIO = "node.koordinator.sh/cpu-normalization-ratio"  # AnnotationCPUNormalizationRatio
__all__ += ["ANNOTATION_CPU_NORMALIZATION_RATIO"]
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"  # LabelManagedBy
#: the NodeResourceTopology CRD (k8stopologyawareschedwg/noderesourcetopology-api)
TOPOLOGY_GROUP_VERSION = "topology.node.k8s.io/v1alpha1"

# -- the Device object's labels (apis/extension/device_share.go) --------------------------------------
LABEL_GPU_VENDOR = "node.koordinator.sh/gpu-vendor"
LABEL_GPU_MODEL = "node.koordinator.sh/gpu-model"
LABEL_GPU_DRIVER_VERSION = "node.koordinator.sh/gpu-driver-version"
GPU_VENDOR_NVIDIA = "nvidia"

# -- GPU resources (apis/extension/device_share.go) ------------------------------------------------------
RESOURCE_GPU = "koordinator.sh/gpu"
RESOURCE_GPU_CORE = "koordinator.sh/gpu-core"
RESOURCE_GPU_MEMORY = "koordinator.sh/gpu-memory"
RESOURCE_GPU_MEMORY_RATIO = "koordinator.sh/gpu-memory-ratio"
RESOURCE_GPU_SHARED = "koordinator.sh/gpu.shared"
RESOURCE_HUAWEI_NPU_CORE = "huawei.com/npu-core"
RESOURCE_HUAWEI_NPU_CPU = "huawei.com/npu-cpu"
RESOURCE_HUAWEI_NPU_DVPP = "huawei.com/npu-dvpp"
LABEL_GPU_VENDOR = "node.koordinator.sh/gpu-vendor"  # NodeDomainPrefix + "/gpu-vendor", on Devices and nodes
GPU_VENDOR_NVIDIA = "nvidia"

# -- gangs (apis/extension/coscheduling.go; the PodGroup labels are scheduler-plugins' apis/scheduling) --
ANNOTATION_GANG_PREFIX = "gang.scheduling.koordinator.sh"
ANNOTATION_GANG_NAME = f"{ANNOTATION_GANG_PREFIX}/name"
ANNOTATION_GANG_MODE = f"{ANNOTATION_GANG_PREFIX}/mode"
#: the GangGroup: a JSON list of gang ids (``namespace/name``) permitted together or not at all
ANNOTATION_GANG_GROUPS = f"{ANNOTATION_GANG_PREFIX}/groups"
#: written at PreBind on the members allowed together: the GangGroupId and how many they were
ANNOTATION_BIND_GANG_GROUP_ID = "internal.scheduling.koordinator.sh/bind-gang-group-id"
ANNOTATION_BIND_GANG_MEMBER_COUNT = "internal.scheduling.koordinator.sh/bind-gang-member-count"
ANNOTATION_BIND_GANG_GROUP_ID_DEPRECATED = "scheduling.koordinator.sh/bind-gang-group-id"
ANNOTATION_BIND_GANG_MEMBER_COUNT_DEPRECATED = "scheduling.koordinator.sh/bind-gang-member-count"
#: scheduler-plugins' ``PodGroupLabel`` (the PodGroup CRD name)
LABEL_POD_GROUP = "pod-group.scheduling.sigs.k8s.io"
#: the deprecated PodGroup label still read after :data:`LABEL_POD_GROUP`
LABEL_POD_GROUP_DEPRECATED = "pod-group.scheduling.sigs.k8s.io/name"

# -- preemption eligibility (apis/extension/preemption.go, elastic_quota.go, schedule_explanation.go) --------
#: ``LabelDisablePreemptible``: "true" keeps the pod from ever being a preemption victim
LABEL_DISABLE_PREEMPTIBLE = "scheduling.koordinator.sh/disable-preemptible"
#: ``LabelPreemptible`` (elastic quota): "false" makes the pod non-preemptible (and counted against its quota's min)
LABEL_QUOTA_PREEMPTIBLE = "quota.scheduling.koordinator.sh/preemptible"
#: ``LabelQuestionedObjectKey``: the job a pod belongs to, for the job-level preemption cost
LABEL_QUESTIONED_OBJECT_KEY = "scheduling.koordinator.sh/questioned-object-key"

# -- CRD API versions (apis/slo/v1alpha1, apis/scheduling/v1alpha1: groupversion_info.go GroupVersion) ---
SLO_GROUP_VERSION = "slo.koordinator.sh/v1alpha1"  # NodeMetric, NodeSLO
SCHEDULING_GROUP_VERSION = "scheduling.koordinator.sh/v1alpha1"  # Device, Reservation

# -- koord-manager's configuration (pkg/util/sloconfig/config.go, apis/configuration/slo_controller_config.go) --
CONFIG_NAMESPACE = "koordinator-system"  # ConfigNameSpace: where slo-controller-config lives by default
SLO_CTRL_CONFIG_MAP = "slo-controller-config"  # SLOCtrlConfigMap
COLOCATION_CONFIG_KEY = "colocation-config"  # ColocationConfigKey: the ColocationCfg JSON
#: apis/configuration/slo_controller_config.go: the CPUNormalizationCfg and ResourceAmplificationCfg JSON
CPU_NORMALIZATION_CONFIG_KEY = "cpu-normalization-config"  # CPUNormalizationConfigKey
RESOURCE_AMPLIFICATION_CONFIG_KEY = "resource-amplification-config"  # ResourceAmplificationConfigKey
__all__ += ["CPU_NORMALIZATION_CONFIG_KEY", "RESOURCE_AMPLIFICATION_CONFIG_KEY"]

# -- pod admission: ClusterColocationProfile (apis/config/v1alpha1, apis/extension/cluster_colocation_profile.go,
# apis/extension/resource.go, apis/extension/priority.go) and kube's namespace label (core/v1 well_known_labels.go)
CONFIG_GROUP_VERSION = "config.koordinator.sh/v1alpha1"  # ClusterColocationProfile
KIND_CLUSTER_COLOCATION_PROFILE = "ClusterColocationProfile"
ANNOTATION_SKIP_UPDATE_RESOURCE = "config.koordinator.sh/skip-update-resources"  # AnnotationSkipUpdateResource
ANNOTATION_EXTENDED_RESOURCE_SPEC = "node.koordinator.sh/extended-resource-spec"  # AnnotationExtendedResourceSpec
#: the (min, max, class) ranges of ``spec.priority`` (PriorityProdValueMin ... PriorityFreeValueMax)
PRIORITY_VALUE_RANGES = ((9000, 9999, PRIORITY_PROD), (7000, 7999, PRIORITY_MID), (5000, 5999, PRIORITY_BATCH),
                         (3000, 3999, PRIORITY_FREE))
#: Kubernetes' LabelMetadataName: the API server sets it on every Namespace to the namespace's name
LABEL_METADATA_NAME = "kubernetes.io/metadata.name"
SCHEDULING_K8S_GROUP_VERSION = "scheduling.k8s.io/v1"  # PriorityClass

__all__ += ["ANNOTATION_EXTENDED_RESOURCE_SPEC", "ANNOTATION_SKIP_UPDATE_RESOURCE", "CONFIG_GROUP_VERSION",
            "KIND_CLUSTER_COLOCATION_PROFILE", "LABEL_METADATA_NAME", "PRIORITY_VALUE_RANGES",
            "SCHEDULING_K8S_GROUP_VERSION"]

# -- slo-controller-config's NodeSLO keys (apis/configuration/slo_controller_config.go) and the node's
# bandwidth annotation (apis/extension/node_qos.go AnnotationNodeBandwidth), read by the NodeSLO controller
RESOURCE_THRESHOLD_CONFIG_KEY = "resource-threshold-config"  # ResourceThresholdConfigKey
RESOURCE_QOS_CONFIG_KEY = "resource-qos-config"  # ResourceQOSConfigKey
CPU_BURST_CONFIG_KEY = "cpu-burst-config"  # CPUBurstConfigKey
SYSTEM_CONFIG_KEY = "system-config"  # SystemConfigKey
HOST_APPLICATION_CONFIG_KEY = "host-application-config"  # HostApplicationConfigKey
ANNOTATION_NODE_BANDWIDTH = "node.koordinator.sh/network-bandwidth"  # AnnotationNodeBandwidth
#: a pod's own CPU burst config, JSON over the NodeSLO's cpuBurstStrategy (apis/slo/v1alpha1/pod.go)
ANNOTATION_POD_CPU_BURST = "koordinator.sh/cpuBurst"  # AnnotationPodCPUBurst

__all__ += ["ANNOTATION_NODE_BANDWIDTH", "ANNOTATION_POD_CPU_BURST", "CPU_BURST_CONFIG_KEY", "HOST_APPLICATION_CONFIG_KEY",
            "RESOURCE_QOS_CONFIG_KEY", "RESOURCE_THRESHOLD_CONFIG_KEY", "SYSTEM_CONFIG_KEY"]

__all__ += ["ANNOTATION_CPU_BASIC_INFO", "ANNOTATION_KUBELET_CPU_MANAGER_POLICY", "ANNOTATION_NODE_BE_CPU_SHARED_POOLS",
            "ANNOTATION_NODE_CPU_ALLOCS", "ANNOTATION_NODE_CPU_SHARED_POOLS", "ANNOTATION_NODE_CPU_TOPOLOGY",
            "GPU_VENDOR_NVIDIA", "LABEL_GPU_DRIVER_VERSION", "LABEL_GPU_MODEL", "LABEL_GPU_VENDOR", "LABEL_MANAGED_BY",
            "TOPOLOGY_GROUP_VERSION"]

# -- the pod's memory QoS config (apis/slo/v1alpha1/pod.go AnnotationPodMemoryQoS), read by memory_qos
ANNOTATION_POD_MEMORY_QOS = "koordinator.sh/memoryQOS"  # AnnotationPodMemoryQoS

__all__ += ["ANNOTATION_POD_MEMORY_QOS"]

# -- pod eviction (apis/extension/constants.go), read by the eviction plugin and the agent's evictor
LABEL_POD_EVICT_ENABLED = "koordinator.sh/eviction-enabled"  # LabelPodEvictEnabled
ANNOTATION_POD_EVICT_POLICY = "koordinator.sh/eviction-policy"  # AnnotationPodEvictPolicy
ANNOTATION_POD_EVICTION_PRIORITY = "koordinator.sh/eviction-priority"  # AnnotationPodEvictionPriority

__all__ += ["ANNOTATION_POD_EVICT_POLICY", "ANNOTATION_POD_EVICTION_PRIORITY", "LABEL_POD_EVICT_ENABLED"]

# -- reservations (apis/extension/reservation.go; pkg/util/reservation/reservation.go for the reserve pod's
# annotations), read by the reservation plugin and by plugins that count what a reservation holds
KIND_RESERVATION = "Reservation"
LABEL_RESERVATION_IGNORED = "scheduling.koordinator.sh/reservation-ignored"  # LabelReservationIgnored
LABEL_RESERVATION_ORDER = "scheduling.koordinator.sh/reservation-order"  # LabelReservationOrder
ANNOTATION_RESERVATION_ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"  # AnnotationReservationAllocated
ANNOTATION_RESERVATION_AFFINITY = "scheduling.koordinator.sh/reservation-affinity"  # AnnotationReservationAffinity
#: AnnotationReservationRestrictedOptions: {"resources": [...]} confining a Restricted reservation to these
ANNOTATION_RESERVATION_RESTRICTED_OPTIONS = "scheduling.koordinator.sh/reservation-restricted-options"
ANNOTATION_RESERVE_POD = "scheduling.koordinator.sh/reserve-pod"  # AnnotationReservePod ("true" on a reserve pod)
ANNOTATION_RESERVATION_NAME = "scheduling.koordinator.sh/reservation-name"  # AnnotationReservationName
ANNOTATION_RESERVATION_NODE = "scheduling.koordinator.sh/reservation-node"  # AnnotationReservationNode

__all__ += ["ANNOTATION_RESERVATION_AFFINITY", "ANNOTATION_RESERVATION_ALLOCATED", "ANNOTATION_RESERVATION_NAME",
            "ANNOTATION_RESERVATION_NODE", "ANNOTATION_RESERVATION_RESTRICTED_OPTIONS", "ANNOTATION_RESERVE_POD",
            "KIND_RESERVATION", "LABEL_RESERVATION_IGNORED", "LABEL_RESERVATION_ORDER"]

# -- pod migration (apis/scheduling/v1alpha1/pod_migration_job_types.go; pkg/descheduler/controllers/migration)
KIND_POD_MIGRATION_JOB = "PodMigrationJob"
POD_MIGRATION_MODE_RESERVATION_FIRST = "ReservationFirst"  # PodMigrationJobModeReservationFirst
POD_MIGRATION_MODE_EVICT_DIRECTLY = "EvictDirectly"  # PodMigrationJobModeEvictionDirectly
#: the label the migration controller puts on the Reservations it creates (reservation.LabelCreatedBy)
LABEL_CREATED_BY = "app.kubernetes.io/created-by"

__all__ += ["KIND_POD_MIGRATION_JOB", "LABEL_CREATED_BY", "POD_MIGRATION_MODE_EVICT_DIRECTLY",
            "POD_MIGRATION_MODE_RESERVATION_FIRST"]

# -- the scheduling hint (apis/extension/multi_scheduler.go, v1.8), read by the scheduling_hint built-in:
# JSON {"nodeNames": [...], "preferredNodeNames": [...], "extensions": {...}}; the internal domain first
ANNOTATION_SCHEDULING_HINT = "internal.scheduling.koordinator.sh/scheduling-hint"  # AnnotationSchedulingHint
#: DeprecatedAnnotationSchedulingHint: read when the internal one is absent or empty
DEPRECATED_ANNOTATION_SCHEDULING_HINT = "scheduling.koordinator.sh/scheduling-hint"

__all__ += ["ANNOTATION_SCHEDULING_HINT", "DEPRECATED_ANNOTATION_SCHEDULING_HINT"]

# -- the Mid tier (apis/extension/node_colocation.go, priority_utils.go): the node's colocation strategy
# annotation and static reserved ratio labels read by koord-manager's midresource plugin, the priority classes'
# default values it compares host applications by
ANNOTATION_NODE_COLOCATION_STRATEGY = "node.koordinator.sh/colocation-strategy"  # AnnotationNodeColocationStrategy
LABEL_MID_STATIC_CPU_RESERVED_RATIO = "node.koordinator.sh/mid-static-cpu-reserved-ratio"  # LabelMidStaticCPUReservedRatio
LABEL_MID_STATIC_MEMORY_RESERVED_RATIO = "node.koordinator.sh/mid-static-memory-reserved-ratio"
#: GetDefaultPriorityByPriorityClass: PriorityProdValueDefault ... PriorityNoneValueDefault
PRIORITY_DEFAULT_VALUES = _MappingProxyType({PRIORITY_PROD: 9500, PRIORITY_MID: 7500, PRIORITY_BATCH: 5500,
                                             PRIORITY_FREE: 3500, PRIORITY_NONE: 0})

__all__ += ["ANNOTATION_NODE_COLOCATION_STRATEGY", "LABEL_MID_STATIC_CPU_RESERVED_RATIO",
            "LABEL_MID_STATIC_MEMORY_RESERVED_RATIO", "PRIORITY_DEFAULT_VALUES"]

# -- koordfw's own wire names (not Koordinator's) ------------------------------------------------------
#: NodeMetric ``status`` field the prediction plugin adds for the risk-budget mode (docs/plugins/risk_budget.md):
#: the predicted distribution of the node's system + Prod usage. Koordinator's fields are unchanged.
NODE_METRIC_PROD_USAGE_DISTRIBUTION = "koordfwProdUsageDistribution"

__all__ += ["ANNOTATION_BIND_GANG_GROUP_ID", "ANNOTATION_BIND_GANG_GROUP_ID_DEPRECATED",
            "ANNOTATION_BIND_GANG_MEMBER_COUNT", "ANNOTATION_BIND_GANG_MEMBER_COUNT_DEPRECATED",
            "ANNOTATION_GANG_GROUPS", "LABEL_DISABLE_PREEMPTIBLE", "LABEL_QUOTA_PREEMPTIBLE",
            "LABEL_QUESTIONED_OBJECT_KEY"]

# -- network-topology-aware gangs (apis/extension/network_topology.go, apis/scheduling/v1alpha1/
# cluster_network_topology_types.go; the tree is built by pkg/scheduler/frameworkext/networktopology) --------
#: a gang's (PodGroup's, or its pods') gather rules: JSON ``{"gatherStrategy": [{"layer": ..., "strategy":
#: "MustGather"|"PreferGather", "podCountMultiple": n}]}`` (AnnotationGangNetworkTopologySpec)
ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC = f"{ANNOTATION_GANG_PREFIX}/network-topology-spec"
#: a member's rank in its gang group (e.g. the PyTorch rank): members are placed in this order
ANNOTATION_GANG_POD_NETWORK_TOPOLOGY_INDEX = f"{ANNOTATION_GANG_PREFIX}/network-topology-index"
#: pods sharing this value are scored towards the topology domains already holding the most of them
ANNOTATION_POD_NETWORK_TOPOLOGY_SELECTOR = "scheduling.koordinator.sh/network-topology-selector"
KIND_CLUSTER_NETWORK_TOPOLOGY = "ClusterNetworkTopology"  # cluster-scoped, scheduling.koordinator.sh/v1alpha1
#: the one ClusterNetworkTopology the scheduler reads (the tree manager's defaultClusterNetworkTopologyName)
CLUSTER_NETWORK_TOPOLOGY_NAME = "default"
#: the built-in layers: the root (the whole cluster) and the leaves (one per Node)
TOPOLOGY_LAYER_CLUSTER = "ClusterTopologyLayer"
TOPOLOGY_LAYER_NODE = "NodeTopologyLayer"
NETWORK_TOPOLOGY_MUST_GATHER = "MustGather"
NETWORK_TOPOLOGY_PREFER_GATHER = "PreferGather"

__all__ += ["ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC", "ANNOTATION_GANG_POD_NETWORK_TOPOLOGY_INDEX",
            "ANNOTATION_POD_NETWORK_TOPOLOGY_SELECTOR", "CLUSTER_NETWORK_TOPOLOGY_NAME",
            "KIND_CLUSTER_NETWORK_TOPOLOGY", "NETWORK_TOPOLOGY_MUST_GATHER", "NETWORK_TOPOLOGY_PREFER_GATHER",
            "TOPOLOGY_LAYER_CLUSTER", "TOPOLOGY_LAYER_NODE"]

# -- NUMA topology policy (apis/extension/numa_aware.go: LabelNUMATopologyPolicy, AnnotationNUMATopologySpec) ---
#: a node's NUMA topology policy: BestEffort, Restricted or SingleNUMANode (empty: none)
LABEL_NUMA_TOPOLOGY_POLICY = "node.koordinator.sh/numa-topology-policy"
#: a pod's {"numaTopologyPolicy": ..., "singleNUMANodeExclusive": "Preferred"|"Required"} (since v1.5)
ANNOTATION_NUMA_TOPOLOGY_SPEC = "scheduling.koordinator.sh/numa-topology-spec"
__all__ += ["ANNOTATION_NUMA_TOPOLOGY_SPEC", "LABEL_NUMA_TOPOLOGY_POLICY"]

# -- the job queue (Koord-Queue, koordinator-sh/koord-queue v1.8, after kube-queue's apis/queue/v1alpha1): the
# Queue and QueueUnit CRDs, a QueueUnit's phases (QueueUnitPhase) and a Queue's spec.queuePolicy values
QUEUE_API_VERSION = "scheduling.x-k8s.io/v1alpha1"
KIND_QUEUE = "Queue"
KIND_QUEUE_UNIT = "QueueUnit"
QUEUE_UNIT_PHASE_ENQUEUED = "Enqueued"  # waiting in its queue
QUEUE_UNIT_PHASE_DEQUEUED = "Dequeued"  # admitted: its pods may be scheduled
QUEUE_UNIT_PHASE_RUNNING = "Running"  # every minimum member bound
QUEUE_POLICY_PRIORITY = "Priority"  # by priority then age; a unit that does not fit lets the next ones by
QUEUE_POLICY_BLOCK = "Block"  # strictly in order: the head that does not fit holds the queue

__all__ += ["KIND_QUEUE", "KIND_QUEUE_UNIT", "QUEUE_API_VERSION", "QUEUE_POLICY_BLOCK", "QUEUE_POLICY_PRIORITY",
            "QUEUE_UNIT_PHASE_DEQUEUED", "QUEUE_UNIT_PHASE_ENQUEUED", "QUEUE_UNIT_PHASE_RUNNING"]

# -- device topology (apis/extension/device_share.go) ------------------------------------------------------
#: AnnotationDeviceAllocateHint: per device type, e.g. ``{"gpu": {"requiredTopologyScope": "PCIe"}}``
ANNOTATION_DEVICE_ALLOCATE_HINT = "scheduling.koordinator.sh/device-allocate-hint"
#: DeviceTopologyScopeLevel: a deeper scope has the higher level
DEVICE_TOPOLOGY_SCOPE_LEVEL = _MappingProxyType({"Device": 4, "PCIe": 3, "NUMANode": 2, "Node": 1})
__all__ += ["ANNOTATION_DEVICE_ALLOCATE_HINT", "DEVICE_TOPOLOGY_SCOPE_LEVEL"]
