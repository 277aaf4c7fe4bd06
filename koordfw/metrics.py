"""Prometheus metrics of one process, in a registry that every server mode exposes (``/metrics``)."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterator
from typing import Any

import attrs
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily

REGISTRY = CollectorRegistry(auto_describe=True)

_callers: weakref.WeakSet[Any] = weakref.WeakSet()


class _PluginDurations:
    """Per-plugin time, read from the hook callers on scrape (no cost on the hot path)."""

    def collect(self) -> Iterator[CounterMetricFamily]:  # noqa: D401 - prometheus collector protocol
        calls = CounterMetricFamily("koordfw_plugin_calls", "Plugin hook calls", labels=["plugin", "hook"])
        secs = CounterMetricFamily("koordfw_plugin_duration_seconds", "Time spent in plugin bodies",
                                   labels=["plugin", "hook"])
        totals: dict[tuple[str, str], list[float]] = {}
        for c in list(_callers):
            for k, (n, s) in c.durations.items():
                t = totals.setdefault(k, [0, 0.0])
                t[0] += n
                t[1] += s
        for (plugin, hook), (n, s) in sorted(totals.items()):
            calls.add_metric([plugin, hook], n)
            secs.add_metric([plugin, hook], s)
        yield calls
        yield secs


REGISTRY.register(_PluginDurations())


def track_caller(caller: Any) -> None:
    _callers.add(caller)


@attrs.frozen
class SchedulerMetrics:
    attempts: Counter
    cycle_latency: Histogram


@functools.cache
def scheduler_metrics() -> SchedulerMetrics:
    """Created on first use (once per process: a collector can be registered only once)."""
    return SchedulerMetrics(
        attempts=Counter("koordfw_schedule_attempts", "Scheduling attempts by result", ["result"],
                         registry=REGISTRY),
        cycle_latency=Histogram("koordfw_scheduling_cycle_seconds", "Scheduling cycle latency",
                                buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                         0.1, 0.25, 0.5, 1.0), registry=REGISTRY),
    )
