"""Helpers for the node agent tests: a registry of node plugins. The fixtures (a fake kubelet cgroup tree,
fake /proc and /sys) are in conftest.py; the agent's clock in tests is koordfw's VirtualClock."""

from __future__ import annotations

from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict


def make_registry(plugin_config: dict | None = None, only=("be_suppress",)) -> Registry:
    prof = profile_from_dict({"pluginConfig": plugin_config or {}})
    return Registry(prof).load(only=set(only))
