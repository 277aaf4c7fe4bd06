"""Fixtures for the gang tests; the builders are in gang_testkit.py."""

from __future__ import annotations

import pytest
from gang_testkit import cluster


@pytest.fixture
def gang_cluster():
    return cluster
