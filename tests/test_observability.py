"""Logs name the plugin that caused them; metrics land in the shared Prometheus registry; layers hold."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import structlog
from prometheus_client import generate_latest

from koordfw import hookimpl
from koordfw.log import configure
from koordfw.metrics import REGISTRY
from koordfw.testing import ClusterBuilder, schedule

ROOT = Path(__file__).resolve().parents[1]


def test_records_caused_by_a_plugin_carry_its_name(capsys):
    configure("json", "info")
    try:
        class Chatty:
            @hookimpl
            def filter(self, pod, nodes):
                structlog.get_logger("third.party").info("looking at nodes", count=len(nodes))

        schedule(ClusterBuilder().node("n").pod("p", cpu="1"), plugins={"chatty": Chatty()})
        records = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
        mine = [r for r in records if r.get("event") == "looking at nodes"]
        assert mine and mine[0]["plugin"] == "chatty" and mine[0]["count"] == 1
    finally:
        configure("console", "warning")


def test_scheduler_metrics_are_exported():
    schedule(ClusterBuilder().node("n").pod("p", cpu="1").pod("q", cpu="100"))
    text = generate_latest(REGISTRY).decode()
    assert 'koordfw_schedule_attempts_total{result="scheduled"}' in text
    assert 'koordfw_schedule_attempts_total{result="unschedulable"}' in text
    assert "koordfw_scheduling_cycle_seconds_bucket" in text
    assert 'koordfw_plugin_duration_seconds_total{hook="filter",plugin="node_resources_fit"}' in text


def test_core_imports_no_engine():
    """The layering of CONVENTIONS.md: koordfw.core never imports an engine, a command or the agent."""
    banned = ("koordfw.engines", "koordfw.commands", "koordfw.agent", "koordfw.cli", "koordfw.testing")
    for f in (ROOT / "koordfw" / "core").rglob("*.py"):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            mods = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = "koordfw." + ("core." if node.level == 1 else "") + base
                mods.append(base)
            elif isinstance(node, ast.Import):
                mods += [a.name for a in node.names]
            for m in mods:
                assert not m.startswith(banned), f"{f.name} imports {m}"


def test_testing_support_imports_no_plugin_and_plugins_ship_no_fakes():
    """Kernel-interface fakes live in koordfw.testing (issue 17): it imports no plugin package, and a
    plugin's product package ships no fake module."""
    for f in (ROOT / "koordfw" / "testing").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            mods = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for m in mods:
                assert not m.startswith("koordfw_"), f"koordfw/testing/{f.name} imports the plugin {m}"
    shipped = [p.relative_to(ROOT) for p in (ROOT / "plugins").glob("*/koordfw_*/*.py") if p.stem.startswith("fake")]
    assert not shipped, f"fakes in product packages: {shipped}"
