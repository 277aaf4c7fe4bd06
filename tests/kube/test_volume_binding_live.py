"""volume_binding's writes on a live cluster (the fake API server): a WaitForFirstConsumer claim is
annotated with ``volume.kubernetes.io/selected-node`` = the pod's node, a matched static PV gets the claim's
``claimRef``, through ``handle.patch_object`` (a merge PATCH with the cached resourceVersion, re-read and
retried on a 409 while the precondition holds); the scheduler's RBAC allows those writes."""

from __future__ import annotations

from kube_testkit import node, pod, running, wait_for

from koordfw.builtin.volume_binding import BOUND_BY_CONTROLLER, SELECTED_NODE
from koordfw.engines.kube.engine import KubeSchedulerEngine


def hosts(api, *names):
    for n in names:
        api.create(node(n, labels={"kubernetes.io/hostname": n}))


def storage_class(name, provisioner):
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": provisioner, "volumeBindingMode": "WaitForFirstConsumer"}


def claim(name, sc):
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                     "resources": {"requests": {"storage": "5Gi"}}}}


def local_pv(name, host):
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                     "local": {"path": "/mnt/disks/1"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}}}}


def with_claim(name, claim_name):
    return pod(name, volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}])


def node_of(api, name):
    return ((api.get("pods", name, "default") or {}).get("spec") or {}).get("nodeName")


def annotations(obj):
    return (obj or {}).get("metadata", {}).get("annotations") or {}


async def test_a_wait_for_first_consumer_claim_is_annotated_with_the_chosen_node(api, client, registry):
    hosts(api, "n0", "n1")
    api.create(storage_class("ssd", "ebs.csi.aws.com"))
    api.create(claim("data-db-0", "ssd"))
    api.create(with_claim("db-0", "data-db-0"))
    eng = KubeSchedulerEngine(registry, client, flush_interval=0.1)
    async with running(eng):
        await wait_for(lambda: node_of(api, "db-0") is not None, what="db-0 bound")
        chosen = node_of(api, "db-0")
        got = api.get("persistentvolumeclaims", "data-db-0", "default")
        assert annotations(got)[SELECTED_NODE] == chosen
        assert got["status"] == {"phase": "Pending"} and got["spec"]["volumeMode"] == "Filesystem"  # defaulted
        assert eng.object_patches == 1 and eng.object_patch_conflicts == 0
        # the cache has the written claim (the API's answer, or its watch echo)
        cached = eng.cluster.get_object("PersistentVolumeClaim", "default/data-db-0")
        assert annotations(cached)[SELECTED_NODE] == chosen


async def test_a_static_pv_gets_the_claim_ref_and_the_pod_its_node(api, client, registry):
    hosts(api, "n0", "n1")
    api.create(storage_class("local", "kubernetes.io/no-provisioner"))
    api.create(local_pv("local-pv-1", "n1"))
    api.create(claim("data-a", "local"))
    api.create(with_claim("a-0", "data-a"))
    eng = KubeSchedulerEngine(registry, client, flush_interval=0.1)
    async with running(eng):
        await wait_for(lambda: node_of(api, "a-0") == "n1", what="a-0 bound to the PV's node")
        pv = api.get("persistentvolumes", "local-pv-1")
        ref = pv["spec"]["claimRef"]
        uid = api.get("persistentvolumeclaims", "data-a", "default")["metadata"]["uid"]
        assert (ref["kind"], ref["namespace"], ref["name"], ref["uid"]) == ("PersistentVolumeClaim", "default",
                                                                            "data-a", uid)
        assert annotations(pv)[BOUND_BY_CONTROLLER] == "yes"
        # a second claim of the class finds no free PV: its pod stays pending with kube's reason
        api.create(claim("data-b", "local"))
        api.create(with_claim("b-0", "data-b"))

        def refused():
            conds = (api.get("pods", "b-0", "default").get("status") or {}).get("conditions") or []
            return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conds)

        await wait_for(refused, what="b-0 unschedulable")
        conds = api.get("pods", "b-0", "default")["status"]["conditions"]
        assert "didn't find available persistent volumes to bind" in conds[0]["message"]
        assert node_of(api, "b-0") is None


async def test_patch_object_retries_a_conflict_and_honours_the_precondition(api, client, registry):
    api.create(claim("c", "ssd"))
    eng = KubeSchedulerEngine(registry, client)
    stale = api.get("persistentvolumeclaims", "c", "default")
    # someone else changes the claim: the cached resourceVersion is stale now
    cur = api.get("persistentvolumeclaims", "c", "default")
    cur["metadata"]["labels"] = {"team": "db"}
    api.replace("persistentvolumeclaims", cur)
    free = lambda o: SELECTED_NODE not in annotations(o)  # noqa: E731
    out = await eng.patch_object("PersistentVolumeClaim", stale, {"metadata": {"annotations": {SELECTED_NODE: "n0"}}},
                                 free)
    assert out is not None and annotations(out)[SELECTED_NODE] == "n0"
    got = api.get("persistentvolumeclaims", "c", "default")
    assert annotations(got)[SELECTED_NODE] == "n0" and got["metadata"]["labels"] == {"team": "db"}  # merged
    assert (eng.object_patches, eng.object_patch_conflicts) == (1, 1)
    # the newest version was selected for another node meanwhile: not overwritten
    out = await eng.patch_object("PersistentVolumeClaim", stale, {"metadata": {"annotations": {SELECTED_NODE: "n1"}}},
                                 free)
    assert out is None
    assert annotations(api.get("persistentvolumeclaims", "c", "default"))[SELECTED_NODE] == "n0"
    # gone: nothing written
    api.delete("persistentvolumeclaims", "c", "default")
    assert await eng.patch_object("PersistentVolumeClaim", stale, {"metadata": {"labels": {"x": "y"}}}) is None


def test_the_scheduler_may_write_claims_and_volumes():
    from deploy_testkit import DOCS, cluster_rules, may

    rules = cluster_rules([(w, d) for w, d in DOCS if w.startswith("scheduler")], "koordfw-system",
                          "koordfw-scheduler")
    for resource in ("persistentvolumes", "persistentvolumeclaims"):
        for verb in ("get", "list", "watch", "patch", "update"):
            assert may(rules, verb, "", resource), f"the scheduler may not {verb} {resource}"
