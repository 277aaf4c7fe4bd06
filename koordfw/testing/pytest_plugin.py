"""pytest plugin (entry point ``pytest11``): fixtures for testing koordfw plugins.

* ``cluster_builder``: a fresh :class:`koordfw.testing.ClusterBuilder`.
* ``koordfw_schedule``: :func:`koordfw.testing.schedule`.
* ``koordfw_registry``: a factory for a fresh plugin registry (``koordfw_registry(profile, plugins=...)``).
* ``virtual_clock``: a :class:`VirtualClock` starting at 1,000,000 s.
* ``kube_control_plane`` (session) and ``kube_plane`` (per test, sweeping up after it): a real
  kube-apiserver, etcd and kube-controller-manager on loopback (:mod:`koordfw.testing.control_plane`).

And, for every test, structlog's configuration is put back as it was after the test: a test that runs a
command in-process (``koordfw.cli.main`` configures logging, at level warning by default) must not
leave later tests' ``structlog.testing.capture_logs`` blind to info events.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import structlog

from . import ClusterBuilder, VirtualClock, schedule
from .control_plane import ControlPlane, Sweep

if TYPE_CHECKING:
    from ..core.plugins import Registry
    from ..core.profile import Profile


@pytest.fixture(autouse=True)
def _koordfw_structlog_isolation() -> Iterator[None]:
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture
def cluster_builder() -> ClusterBuilder:
    return ClusterBuilder()


@pytest.fixture
def koordfw_schedule() -> Callable[..., Any]:
    return schedule


@pytest.fixture
def koordfw_registry() -> Callable[..., Registry]:
    from ..engines.embedded import build_registry

    def make(profile: Profile | dict[str, Any] | str | Path | None = None, *, plugins: dict[str, Any] | None = None,
             only: Collection[str] | None = (), disable: Iterable[str] = ()) -> Registry:
        return build_registry(profile, plugins=plugins, autoload=only is None or bool(only),
                              only=None if only is None else set(only), disable=disable)

    return make


@pytest.fixture
def virtual_clock() -> VirtualClock:
    return VirtualClock(1_000_000.0)


@pytest.fixture(scope="session")
def kube_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real control plane for the whole session (:mod:`koordfw.testing.control_plane`): etcd,
    kube-apiserver (RBAC on) and kube-controller-manager from ``$KUBEBUILDER_ASSETS`` or what
    ``scripts/kube-binaries.sh`` provides. Tests share it: use :func:`kube_plane`, which removes what a
    test added."""
    plane = ControlPlane.start(tmp_path_factory.mktemp("kube"))
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def kube_plane(kube_control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """The session's real control plane; the nodes, namespaces (with their pods) and webhook
    configurations the test adds are deleted after it."""
    sweep = Sweep(kube_control_plane)
    try:
        yield kube_control_plane
    finally:
        sweep.clean()
