"""Every option of every command says what it is for in --help (issue 32 point 11: --leader-elect-*,
--state, --mode, --seed, --output had none)."""

from __future__ import annotations

import argparse

from koordfw.cli import build_parser


def walk(parser: argparse.ArgumentParser, name: str = "koordfw"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from walk(p, f"{name} {sub}")


def test_every_option_has_help():
    missing = []
    for name, parser in walk(build_parser()):
        for action in parser._actions:
            if action.option_strings and action.help in (None, "") and not isinstance(
                    action, (argparse._HelpAction, argparse._VersionAction)):
                missing.append(f"{name} {'/'.join(action.option_strings)}")
    assert missing == []
