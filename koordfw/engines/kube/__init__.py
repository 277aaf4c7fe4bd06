"""The Kubernetes engine: the only layer of koordfw that talks to the Kubernetes API.

``kubernetes_asyncio`` is needed only to read kubeconfig files and in-cluster credentials; it is
imported lazily (``pip install 'koordfw[kubernetes]'``).
"""

from .client import ApiError, KubeClient
from .ratelimit import TokenBucket

__all__ = ["ApiError", "KubeClient", "TokenBucket"]
