"""Helpers shared by koordfw's own commands; the plugin options come from the public command API."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..command_api import add_plugin_options, registry_from_args

__all__ = ["DAY", "add_plugin_options", "number", "registry_from_args"]


def number(kind: type, lo: float, hi: float, *, above: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: an int or float in ``[lo, hi]`` (``(lo, hi]`` with ``above``), finite, so a
    flag such as ``--interval nan`` is refused at parse time rather than stopping a loop later."""

    def parse(text: str) -> float:
        try:
            v = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if v != v or not (lo < v <= hi if above else lo <= v <= hi):
            raise argparse.ArgumentTypeError(f"must be {'above' if above else 'at least'} {lo:g} and at most {hi:g}, "
                                             f"got {text!r}")
        return v

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


#: a duration flag in seconds: finite, within a day-scale bound chosen per flag
DAY = 86400.0
