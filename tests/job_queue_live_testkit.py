"""What the job-queue live tests (fake API server and real kube-apiserver) share: the scheduler profile and a
team's ElasticQuota (min = max, so nothing is borrowed)."""

from __future__ import annotations

CONFIG = {"disable": ["default_preemption"],
          "pluginConfig": {"elastic_quota": {"monitorAllQuotas": False}, "job_queue": {}}}


def quota(name: str, cpu: int) -> dict:
    res = {"cpu": str(cpu), "memory": "100Gi"}
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": name}, "spec": {"min": res, "max": res}}
