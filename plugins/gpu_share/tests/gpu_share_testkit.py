"""Builders shared by the gpu_share tests."""

from __future__ import annotations

from koordfw.testing import ClusterBuilder


def gpu_cluster(gpus=2):
    """Two 32-CPU T4 nodes n1 and n2 with ``gpus`` whole GPUs each."""
    b = ClusterBuilder()
    for n in ("n1", "n2"):
        b.node(n, cpu="32", memory="128Gi", labels={"node.koordinator.sh/gpu-model": "T4"},
               **{"nvidia.com__gpu": str(gpus), "koordinator.sh__gpu-core": str(100 * gpus),
                  "koordinator.sh__gpu-memory-ratio": str(100 * gpus), "koordinator.sh__gpu-memory": f"{16 * gpus}Gi"})
    return b
