"""Build in-memory ``Manifests`` from model objects (tests, embedders, generated plugin tests)."""

from __future__ import annotations

from typing import Iterable

from .core.manifests import Manifests
from .core.model import Node, Pod


def manifests_of(nodes: Iterable[Node], pods: Iterable[Pod] = (), objects: Iterable[tuple[str, dict]] = ()) -> Manifests:
    return Manifests(nodes=list(nodes), pods=list(pods), objects=list(objects))
