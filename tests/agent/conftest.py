"""Fixtures for the node agent: a fake kubelet cgroup tree, fake /proc and /sys."""

from __future__ import annotations

import pytest

from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.testing.cgroups import FakeNode  # noqa: F401  (re-exported for the tests here)


@pytest.fixture
def fake_node(tmp_path):
    return FakeNode(tmp_path)


def make_registry(plugin_config: dict | None = None, only=("be_suppress",)) -> Registry:
    prof = profile_from_dict({"pluginConfig": plugin_config or {}})
    return Registry(prof).load(only=set(only))


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

