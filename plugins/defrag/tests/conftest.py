"""Fixtures for the defrag tests; the builders are in defrag_testkit.py."""

from __future__ import annotations

import pytest


@pytest.fixture
def lnl():
    """Default LowNodeLoad args of the tests: abnormal at once (one round)."""
    return {"lowThresholds": {"cpu": 30, "memory": 30}, "highThresholds": {"cpu": 70, "memory": 70},
            "anomalyCondition": {"consecutiveAbnormalities": 1}}
