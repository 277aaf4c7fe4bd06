"""The plugin contract's types (koordfw.core.contract): one Protocol per hook, and every installed plugin
(the built-ins and the plugin packages, loaded through the ``koordfw`` entry points) satisfies the
Protocol of each hook it implements (a structural check), and mypy is made to check each hook against
its kind statically by the packages' ``_contract.py`` modules (koordfw/builtin/_contract.py for the
built-ins)."""

from __future__ import annotations

import importlib.util
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import koordfw.contract
from koordfw import hookimpl, hookspecs
from koordfw.core.contract import KINDS


def test_every_hook_has_a_kind_and_every_kind_is_exported():
    assert list(KINDS) == sorted(KINDS, key=hookspecs.HOOK_NAMES.index)
    assert set(KINDS) == set(hookspecs.HOOK_NAMES)
    assert len(set(KINDS.values())) == len(KINDS)
    for kind in KINDS.values():  # public in koordfw.contract (koordfw itself is the 49-name plugin contract)
        assert getattr(koordfw.contract, kind.__name__) is kind
        assert kind.__name__ in koordfw.contract.__all__


def _implemented(obj: object) -> list[str]:
    return [h for h in hookspecs.HOOK_NAMES if getattr(getattr(obj, h, None), "koordfw_impl", None) is not None]


ENTRY_POINTS = sorted(entry_points(group="koordfw"), key=lambda ep: ep.name)


@pytest.mark.parametrize("ep", ENTRY_POINTS, ids=[ep.name for ep in ENTRY_POINTS])
def test_installed_plugins_satisfy_their_kinds(ep):
    obj = ep.load()
    for h in _implemented(obj):  # none for a package that only adds commands (colocation_replay)
        assert isinstance(obj, KINDS[h]), f"{ep.name}.{h}: not a {KINDS[h].__name__}"


def test_builtins_are_among_the_plugins_checked():
    builtins = {ep.name for ep in ENTRY_POINTS if ep.value.startswith("koordfw.builtin.")}
    assert {"node_resources_fit", "taint_toleration", "default_binder", "priority_sort"} <= builtins


def test_a_plugin_is_of_the_kinds_of_its_hooks_only():
    class OnlyFilter:
        @hookimpl
        def filter(self, pod, nodes):
            return None

    p = OnlyFilter()
    assert isinstance(p, koordfw.contract.FilterPlugin)
    assert not isinstance(p, koordfw.contract.ScorePlugin)
    assert not isinstance(p, koordfw.contract.QoSPlugin)


@pytest.mark.parametrize("ep", ENTRY_POINTS, ids=[ep.name for ep in ENTRY_POINTS])
def test_mypy_checks_every_hook_of_every_installed_plugin(ep):
    """Each package's ``_contract.py`` (koordfw/builtin/_contract.py for the built-ins) assigns each of its
    plugins to the Protocol of each hook it implements, so mypy checks the hook against its kind."""
    obj = ep.load()
    hooks = _implemented(obj)
    if not hooks:
        return
    module = ep.value.partition(":")[0]
    package = "koordfw.builtin" if module.startswith("koordfw.builtin.") else module.partition(".")[0]
    spec = importlib.util.find_spec(f"{package}._contract")
    assert spec is not None and spec.origin, f"{package} has no _contract module"
    text = Path(spec.origin).read_text()
    for h in hooks:
        assert f"_{h}_{ep.name}: {KINDS[h].__name__} = " in text, f"{package}._contract lacks {ep.name}.{h}"
