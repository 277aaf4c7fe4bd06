"""The public command API: how a package adds ``koordfw`` subcommands (issue 17, one front door per concept).

An entry point of the group ``koordfw.commands`` (a top-level ``koordfw NAME``) or
``koordfw.agent_commands`` (``koordfw agent NAME``) names a function ``register(commands: Commands)``.
It adds its parser with :meth:`Commands.add`, sets ``func`` (``args -> int``, the exit status) with
``set_defaults``, and builds the plugin registry of the run with :func:`registry_from_args` after
:func:`add_plugin_options`. The command runs the embedded engine with :class:`koordfw.EmbeddedEngine`
or :func:`koordfw.simulate`, and the agent's planner with :func:`koordfw.plan_writes`; all of these are
exported by ``koordfw``, so no command imports ``koordfw.commands``, ``koordfw.engines`` or
``koordfw.agent``. A :class:`~koordfw.KoordfwError` raised by ``func`` prints one ``koordfw: error:``
line and exits 2.

Several packages may share one command group (``koordfw replay openb`` from gpu_share, ``koordfw replay
colocation`` from colocation_replay): each calls :meth:`Commands.group` with the group's name, the first
call creates ``koordfw replay`` and later ones get the same nested :class:`Commands`, so each adds its
own subcommand with :meth:`add` whatever the order the entry points load in.
"""

from __future__ import annotations

import argparse
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core.plugins import Registry


#: the options every (sub)command parser of a parser accepts, by that parser (see :meth:`Commands.nested`)
_PARENTS: weakref.WeakKeyDictionary[argparse.ArgumentParser, tuple[argparse.ArgumentParser, ...]] = (
    weakref.WeakKeyDictionary())


class Commands:
    """The subcommands of one ``koordfw`` command (``koordfw`` itself, ``koordfw agent``, or a command's
    own, see :meth:`nested`). Wraps argparse's sub-parser action, which stays out of the contract.

    Every parser :meth:`add` makes also accepts the global options (``--log-format``, ``--log-level``),
    so they may follow the subcommand's name as well as precede it; subcommands of subcommands get them
    too."""

    def __init__(self, subparsers: argparse._SubParsersAction,
                 parents: Sequence[argparse.ArgumentParser] = ()) -> None:
        self._sub = subparsers
        self._parents = tuple(parents)
        #: the shared groups made by :meth:`group`, by name
        self._groups: dict[str, Commands] = {}

    def add(self, name: str, *, help: str, description: str | None = None) -> argparse.ArgumentParser:
        """Add the subcommand ``name``: its parser, to add arguments to and ``set_defaults(func=...)``.
        ``help`` is its line in the parent's list, ``description`` the text of its ``--help``."""
        p = self._sub.add_parser(name, help=help, description=description, parents=list(self._parents))
        if self._parents:
            _PARENTS[p] = self._parents
        return p

    def group(self, name: str, *, help: str, description: str | None = None, metavar: str = "COMMAND") -> Commands:
        """The subcommands of the shared command ``name`` (as ``koordfw replay``), created on the first call
        (its ``help`` and ``description`` are the first caller's) and returned as they are on later ones,
        so that several packages add subcommands to it. The chosen subcommand is ``args.<name>_command``;
        the group alone (``koordfw replay``) prints its help and exits 2."""
        got = self._groups.get(name)
        if got is not None:
            return got
        p = self.add(name, help=help, description=description)
        nested = Commands.nested(p, dest=f"{name.replace('-', '_')}_command", metavar=metavar)

        def usage(_args: argparse.Namespace) -> int:
            p.print_help()
            return 2

        p.set_defaults(func=usage)
        self._groups[name] = nested
        return nested

    @classmethod
    def nested(cls, parser: argparse.ArgumentParser, *, dest: str, metavar: str = "COMMAND",
               parents: Sequence[argparse.ArgumentParser] | None = None) -> Commands:
        """Subcommands under ``parser`` (as ``koordfw replay openb``); the chosen name is ``args.<dest>``.
        Their parsers share ``parents``' options; by default those of ``parser`` itself when
        :meth:`add` made it (the global options)."""
        inherited = _PARENTS.get(parser, ()) if parents is None else tuple(parents)
        return cls(parser.add_subparsers(dest=dest, metavar=metavar), inherited)


def add_plugin_options(parser: argparse.ArgumentParser) -> None:
    """The options of a command that loads plugins: ``--profile FILE``, ``--disable NAME`` (repeatable),
    ``--strict-plugins``; :func:`registry_from_args` reads them."""
    parser.add_argument("--profile", metavar="FILE", help="profile YAML (plugins, weights, pluginConfig)")
    parser.add_argument("--disable", metavar="NAME", action="append", default=[], help="disable a plugin (repeatable)")
    parser.add_argument("--strict-plugins", action="store_true", help="a plugin that fails to load is fatal")


def registry_from_args(args: argparse.Namespace) -> Registry:
    """The plugins of the run, loaded and configured from :func:`add_plugin_options`' options (as
    :func:`koordfw.build_registry`); plugins that failed to load are in ``registry.errors``."""
    import sys

    from .engines.embedded import build_registry

    registry = build_registry(args.profile, disable=args.disable, strict=args.strict_plugins)
    for w in registry.profile.warnings:  # what a Koordinator/kube configuration could not carry over
        print(f"koordfw: warning: {registry.profile.source}: {w}", file=sys.stderr)
    return registry
