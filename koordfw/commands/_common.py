"""Options shared by the commands that load plugins."""

from __future__ import annotations

import argparse


def add_plugin_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", metavar="FILE", help="profile YAML (plugins, weights, pluginConfig)")
    p.add_argument("--disable", metavar="NAME", action="append", default=[], help="disable a plugin (repeatable)")
    p.add_argument("--strict-plugins", action="store_true", help="a plugin that fails to load is fatal")


def registry_from_args(args: argparse.Namespace):
    from ..engines.embedded import build_registry

    return build_registry(args.profile, disable=args.disable, strict=args.strict_plugins)


def number(kind: type, lo: float, hi: float, *, above: bool = False):
    """An argparse ``type``: an int or float in ``[lo, hi]`` (``(lo, hi]`` with ``above``), finite, so a
    flag such as ``--interval nan`` is refused at parse time rather than stopping a loop later."""

    def parse(text: str):
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
