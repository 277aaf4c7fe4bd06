"""The ``koordfw`` command line. User errors print one message and exit 2; no traceback."""

from __future__ import annotations

import argparse
import difflib
import importlib
import pkgutil
import re
import sys
from importlib import metadata

from . import __version__
from .command_api import Commands
from .core.errors import KoordfwError

#: the levels ``--log-level`` accepts (any case)
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _log_level(value: str) -> str:
    level = value.lower()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{value!r}: expected one of {', '.join(LOG_LEVELS)}")
    return level


def add_global_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, default: bool) -> None:
    """``--log-format`` and ``--log-level``: with their defaults on the top-level parser; without
    (``argparse.SUPPRESS``) on every subcommand's, so a value given before the subcommand's name is
    kept unless the subcommand's own arguments give it again (the later one wins)."""
    parser.add_argument("--log-format", choices=("auto", "console", "json"),
                        default="auto" if default else argparse.SUPPRESS,
                        help="log records as console text or JSON lines (default auto: console on a terminal)")
    parser.add_argument("--log-level", type=_log_level, metavar="LEVEL",
                        default="warning" if default else argparse.SUPPRESS,
                        help="debug, info, warning (default), error or critical")


class Parser(argparse.ArgumentParser):
    """argparse with kube-style help for typos: an unknown option is reported by the (sub)command that
    was given it, with that command's usage and the closest option it has (``--profle`` → ``--profile``);
    an unknown command gets the closest command. Every subcommand's parser is of this class too
    (``add_subparsers`` makes its parsers of the parent's class)."""

    #: the top-level parser; subcommands report their own unknown options
    top = False

    def parse_known_args(self, args: list[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = super().parse_known_args(args, namespace)
        if extras and not self.top:
            self.error(self.unrecognized(extras))
        return ns, extras

    def parse_args(self, args: list[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(self.unrecognized(extras))
        return ns

    def unrecognized(self, extras: list[str]) -> str:
        msg = f"unrecognized arguments: {' '.join(extras)}"
        options = [o for o in self._option_string_actions if o.startswith("--")]
        for arg in extras:
            if arg.startswith("--"):
                near = difflib.get_close_matches(arg.split("=", 1)[0], options, n=1, cutoff=0.6)
                if near:
                    return f"{msg} (did you mean {near[0]}?)"
        return msg

    def error(self, message: str) -> None:  # type: ignore[override]
        m = re.match(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(3))
            near = difflib.get_close_matches(m.group(2), choices, n=1, cutoff=0.6)
            if near:
                message = f"{message}; did you mean {near[0]!r}?"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="koordfw", description="Colocation scheduling: kernel plus plugins.")
    parser.top = True
    parser.add_argument("--version", action="version", version=f"koordfw {__version__}")
    add_global_options(parser, default=True)
    common = Parser(add_help=False)  # only lends its options to every subcommand
    add_global_options(common.add_argument_group("global options"), default=False)
    sub = Commands.nested(parser, dest="command", metavar="COMMAND", parents=[common])
    from . import commands

    for mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")):
        importlib.import_module(f"{commands.__name__}.{mod}").register(sub)
    # installed packages add commands through this group; each entry point is a register(Commands) too
    for ep in sorted(metadata.entry_points(group="koordfw.commands"), key=lambda e: e.name):
        try:
            ep.load()(sub)
        except Exception as e:  # a broken add-on command must not break the others
            print(f"koordfw: command {ep.name!r} from {ep.dist.name if ep.dist else '?'} failed to load: {e}",
                  file=sys.stderr)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .log import configure

    configure(args.log_format, args.log_level)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KoordfwError as e:
        print(f"koordfw: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
