"""The built-in plugins are koordfw's own ``koordfw`` entry points (pyproject.toml), loaded first in the
order pyproject declares them, and marked builtin."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from koordfw.core import plugins
from koordfw.core.plugins import Registry

ROOT = Path(__file__).resolve().parents[1]
DECLARED: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["koordfw"]


def builtins_of(reg: Registry) -> list[str]:
    return [name for name, info in reg.plugins.items() if info.builtin]


def test_builtins_are_the_entry_points_pyproject_declares():
    installed = {ep.name: ep.value for ep in metadata.distribution("koordfw").entry_points.select(group="koordfw")}
    assert installed == DECLARED, "the installed metadata is stale: pip install --no-deps -e ."


def test_builtin_order_is_pyprojects_entry_point_order():
    reg = Registry().load(autoload=False)
    assert builtins_of(reg) == list(DECLARED)
    assert list(reg.plugins) == list(DECLARED)
    assert [ep.name for ep in plugins.builtin_entry_points()] == list(DECLARED)


def test_builtins_come_first_with_koordfws_distribution():
    reg = Registry().load()
    names = list(reg.plugins)
    assert names[:len(DECLARED)] == list(DECLARED)
    assert all(not reg.plugins[n].builtin for n in names[len(DECLARED):])
    for name in DECLARED:
        info = reg.plugins[name]
        assert info.distribution == "koordfw" and info.version == metadata.version("koordfw")


def test_builtins_ignore_only_and_autoload_but_not_disable():
    reg = Registry().load(only=set(), disable={"node_selector"})
    assert builtins_of(reg) == [n for n in DECLARED if n != "node_selector"]
    assert list(reg.plugins) == builtins_of(reg)


def test_a_builtin_missing_from_the_order_loads_after_the_others(monkeypatch):
    first, *rest = DECLARED
    monkeypatch.setattr(plugins, "BUILTIN_ORDER", tuple(rest))
    assert builtins_of(Registry().load(autoload=False)) == [*rest, first]
