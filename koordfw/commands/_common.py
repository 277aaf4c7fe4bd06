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
