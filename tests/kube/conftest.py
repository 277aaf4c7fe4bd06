"""Fixtures for the Kubernetes engine tests: a fake API server on loopback, a client of it and a registry.
The object factories and engine helpers are in kube_testkit.py."""

from __future__ import annotations

import pytest

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.testing.fake_apiserver import FakeApiServer


@pytest.fixture
async def api():
    async with FakeApiServer(bookmark_interval=0.2) as server:
        yield server


@pytest.fixture
async def client(api):
    async with KubeClient(api.url, qps=0) as c:
        yield c


@pytest.fixture
def registry():
    return build_registry(None, autoload=False)
