"""The hook names are derived from koordfw/hookspecs.py alone: its ``@hookspec`` functions, in definition
order, grouped by its ``_section`` calls; the profile's hook points follow from them."""

from __future__ import annotations

import pytest

from koordfw import hookspecs
from koordfw.core.errors import ConfigError
from koordfw.core.profile import POINTS, camel, profile_from_dict


def _specs_by_line() -> list[str]:
    specs = [f for f in vars(hookspecs).values() if callable(f) and hasattr(f, "koordfw_spec")]
    return [f.__name__ for f in sorted(specs, key=lambda f: f.__code__.co_firstlineno)]


def test_hook_names_are_the_specs_in_definition_order():
    assert hookspecs.HOOK_NAMES == tuple(_specs_by_line())
    assert len(hookspecs.HOOK_NAMES) == len(set(hookspecs.HOOK_NAMES))


def test_sections_partition_the_hooks_in_order():
    flat = tuple(n for names in hookspecs.SECTIONS.values() for n in names)
    assert flat == hookspecs.HOOK_NAMES
    assert all(hookspecs.SECTIONS.values()), "a section without hooks"
    assert hookspecs.SECTIONS["Scheduling cycle"][0] == "queue_sort"
    assert hookspecs.SECTIONS["Binding cycle"][-2:] == ("post_bind", "error_handler")


def test_profile_points_are_every_hook_but_plugin_args():
    assert POINTS is hookspecs.PROFILE_POINTS
    assert set(POINTS) == set(hookspecs.HOOK_NAMES) - {"plugin_args"}
    assert len(POINTS) == len(set(POINTS))
    # the loops' hooks in definition order, then the lifecycle hooks the engines call
    lifecycle = hookspecs.SECTIONS["Lifecycle and configuration"]
    loops = [n for n in hookspecs.HOOK_NAMES if n not in lifecycle]
    assert list(POINTS) == loops + [n for n in lifecycle if n != "plugin_args"]


@pytest.mark.parametrize("point", hookspecs.PROFILE_POINTS)
def test_profile_accepts_every_point(point):
    prof = profile_from_dict({"plugins": {camel(point): {"disabled": [{"name": "*"}]}}})
    assert prof.plugins[point].disabled == {"*"}


def test_profile_refuses_plugin_args_as_a_point():
    with pytest.raises(ConfigError, match="plugins.pluginArgs: unknown hook point"):
        profile_from_dict({"plugins": {"pluginArgs": {}}})
