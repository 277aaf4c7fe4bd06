"""Fixtures for the node agent: a fake kubelet cgroup tree, fake /proc and /sys. The helpers are in
agent_testkit.py."""

from __future__ import annotations

import pytest

from koordfw.testing.cgroups import FakeNode


@pytest.fixture
def fake_node(tmp_path):
    return FakeNode(tmp_path)
