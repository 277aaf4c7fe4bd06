"""pytest plugin (entry point ``pytest11``): fixtures for testing koordfw plugins.

* ``cluster_builder``: a fresh :class:`koordfw.testing.ClusterBuilder`.
* ``koordfw_schedule``: :func:`koordfw.testing.schedule`.
* ``koordfw_registry``: a factory for a fresh plugin registry (``koordfw_registry(profile, plugins=...)``).
* ``virtual_clock``: a :class:`VirtualClock` starting at 1,000,000 s.
"""

from __future__ import annotations

import pytest

from . import ClusterBuilder, VirtualClock, schedule


@pytest.fixture
def cluster_builder() -> ClusterBuilder:
    return ClusterBuilder()


@pytest.fixture
def koordfw_schedule():
    return schedule


@pytest.fixture
def koordfw_registry():
    from ..engines.embedded import build_registry

    def make(profile=None, *, plugins=None, only=(), disable=()):
        return build_registry(profile, plugins=plugins, autoload=only is None or bool(only),
                              only=None if only is None else set(only), disable=disable)

    return make


@pytest.fixture
def virtual_clock() -> VirtualClock:
    return VirtualClock(1_000_000.0)
