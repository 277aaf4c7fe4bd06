"""pytest plugin (entry point ``pytest11``): fixtures for testing koordfw plugins.

* ``cluster_builder``: a fresh :class:`koordfw.testing.ClusterBuilder`.
* ``koordfw_schedule``: :func:`koordfw.testing.schedule`.
* ``koordfw_registry``: a factory for a fresh plugin registry (``koordfw_registry(profile, plugins=...)``).
* ``virtual_clock``: a :class:`VirtualClock` starting at 1,000,000 s.

And, for every test, structlog's configuration is put back as it was after the test: a test that runs a
command in-process (``koordfw.cli.main`` configures logging, at level warning by default) must not
leave later tests' ``structlog.testing.capture_logs`` blind to info events.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog

from . import ClusterBuilder, VirtualClock, schedule


@pytest.fixture(autouse=True)
def _koordfw_structlog_isolation() -> Iterator[None]:
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


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
