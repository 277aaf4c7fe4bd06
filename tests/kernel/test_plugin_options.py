"""pluggy hookimpl options at registration: those the kernel does not honour are refused with an error
naming the plugin, the hook and the option; ``optionalhook`` is honoured."""

from __future__ import annotations

import types

import pytest

from koordfw import hookimpl
from koordfw.core.errors import ConfigError, PluginLoadError
from koordfw.core.plugins import Registry


def module_with(name: str, fn) -> types.ModuleType:
    mod = types.ModuleType(f"plugin_{name}")
    setattr(mod, fn.__name__, fn)
    return mod


def _filter(pod):
    return None


REFUSED = [
    ("tryfirst", hookimpl(tryfirst=True)),
    ("trylast", hookimpl(trylast=True)),
    ("hookwrapper", hookimpl(hookwrapper=True)),
    ("wrapper", hookimpl(wrapper=True)),
    ("specname", hookimpl(specname="filter")),
]


@pytest.mark.parametrize(("option", "mark"), REFUSED, ids=[o for o, _ in REFUSED])
def test_a_module_plugin_with_an_unhonoured_option_is_refused(option, mark):
    def filter(pod):  # noqa: A001 - the hook's name
        return None

    reg = Registry()
    with pytest.raises(PluginLoadError) as e:
        reg.register("opt_plugin", module_with("m", mark(filter)))
    msg = str(e.value)
    assert "'opt_plugin'" in msg
    assert "'filter'" in msg
    assert option in msg
    assert "opt_plugin" not in reg.plugins


@pytest.mark.parametrize(("option", "mark"), REFUSED, ids=[o for o, _ in REFUSED])
def test_a_class_plugin_with_an_unhonoured_option_is_refused(option, mark):
    class Plugin:
        @mark
        def score(self, pod, node):
            return 0

    reg = Registry()
    with pytest.raises(PluginLoadError) as e:
        reg.register("cls_plugin", Plugin)
    msg = str(e.value)
    assert "'cls_plugin'" in msg and "'score'" in msg and option in msg


def test_an_instance_plugin_with_tryfirst_is_refused():
    class Plugin:
        @hookimpl(tryfirst=True)
        def filter(self, pod):
            return None

    with pytest.raises(PluginLoadError, match=r"'inst'.*'filter'.*tryfirst=True"):
        Registry().register("inst", Plugin())


def test_a_false_option_is_not_an_option():
    class Plugin:
        @hookimpl(tryfirst=False, trylast=False, hookwrapper=False, wrapper=False)
        def filter(self, pod):
            return None

    info = Registry().register("fine", Plugin)
    assert info.name == "fine"


def test_optionalhook_on_an_unknown_hook_is_ignored_not_refused():
    class Plugin:
        @hookimpl(optionalhook=True)
        def hook_of_a_later_koordfw(self, pod):
            return None

        @hookimpl
        def filter(self, pod):
            return None

    reg = Registry()
    reg.register("later", Plugin)
    reg.bind(lambda name: None)
    assert [i.plugin for i in reg.impls("filter")] == ["later"]


def test_optionalhook_on_a_module_plugin_is_ignored_not_refused():
    @hookimpl(optionalhook=True)
    def hook_of_a_later_koordfw(pod):
        return None

    reg = Registry()
    reg.register("later_mod", module_with("m", hook_of_a_later_koordfw))
    assert "later_mod" in reg.plugins


def test_an_unknown_hook_without_optionalhook_is_still_refused():
    class Plugin:
        @hookimpl
        def fitler(self, pod):
            return None

    with pytest.raises(ConfigError, match="unknown hook.*fitler"):
        Registry().register("typo", Plugin)


def test_the_profile_orders_a_point_not_tryfirst():
    """tryfirst is refused because the order is the profile's: the later-registered plugin, enabled
    first in the profile, runs first."""
    from koordfw.core.profile import profile_from_dict

    class A:
        @hookimpl
        def filter(self, pod):
            return None

    class B:
        @hookimpl
        def filter(self, pod):
            return None

    reg = Registry(profile_from_dict({"plugins": {"filter": {"enabled": [{"name": "b"}, {"name": "a"}]}}}))
    reg.register("a", A)
    reg.register("b", B)
    reg.bind(lambda name: None)
    assert [i.plugin for i in reg.impls("filter")] == ["b", "a"]
