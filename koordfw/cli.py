"""The ``koordfw`` command line. User errors print one message and exit 2; no traceback."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from importlib import metadata

from . import __version__
from .command_api import Commands
from .core.errors import KoordfwError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="koordfw", description="Colocation scheduling: kernel plus plugins.")
    parser.add_argument("--version", action="version", version=f"koordfw {__version__}")
    parser.add_argument("--log-format", choices=("auto", "console", "json"), default="auto")
    parser.add_argument("--log-level", default="warning", help="debug, info, warning (default), error")
    sub = Commands.nested(parser, dest="command", metavar="COMMAND")
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
