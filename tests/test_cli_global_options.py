"""The global options (``--log-format``, ``--log-level``) are accepted before and after any subcommand's
name, for koordfw's own commands, their subcommands and add-on commands; a value given after the
subcommand wins over one given before it, and one given before it survives the subcommand's parser."""

from __future__ import annotations

import argparse
from importlib import metadata

import pytest

from koordfw import cli
from koordfw.embed import Commands


def parse(argv):
    return cli.build_parser().parse_args(argv)


@pytest.mark.parametrize("argv,level,fmt", [
    ([], "warning", "auto"),
    (["--log-level", "info"], "info", "auto"),
    (["--log-level", "INFO"], "info", "auto"),
    (["--log-format", "json"], "warning", "json"),
    (["--log-level", "info", "--log-format", "json"], "info", "json"),
])
@pytest.mark.parametrize("position", ["before", "after"])
def test_scheduler_accepts_global_options_on_either_side(argv, level, fmt, position):
    full = argv + ["scheduler", "--in-cluster"] if position == "before" else ["scheduler", "--in-cluster"] + argv
    args = parse(full)
    assert (args.command, args.log_level, args.log_format) == ("scheduler", level, fmt)


def test_every_builtin_command_accepts_them_after_its_name():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        opts = {o for a in p._actions for o in a.option_strings}
        assert {"--log-format", "--log-level"} <= opts, name


def test_value_after_the_subcommand_wins():
    args = parse(["--log-level", "error", "--log-format", "console", "extender", "--log-level", "debug"])
    assert (args.log_level, args.log_format) == ("debug", "console")  # format from before, level from after
    args = parse(["--log-level", "error", "scheduler", "--log-format", "json"])
    assert (args.log_level, args.log_format) == ("error", "json")


def test_nested_subcommands_get_them_too():
    args = parse(["--log-level", "info", "agent", "--log-format", "json", "plan", "--state", "s.json",
                  "--log-level", "debug"])
    assert (args.agent_command, args.log_level, args.log_format) == ("plan", "debug", "json")
    args = parse(["--log-level", "error", "agent", "plan", "--state", "s.json"])
    assert args.log_level == "error"


def test_bad_level_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        parse(["scheduler", "--log-level", "loud"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == ("koordfw scheduler: error: argument --log-level: 'loud': expected one of debug, info, warning, "
                   "error, critical")


def _register_hello(commands: Commands) -> None:
    p = commands.add("hello", help="say hello")
    p.add_argument("--name", default="world")
    inner = Commands.nested(p, dest="hello_command")
    inner.add("loud", help="shout it")


class _EntryPoint:
    name = "hello"
    dist = None

    def load(self):
        return _register_hello


def test_add_on_commands_get_them(monkeypatch):
    real = metadata.entry_points

    def entry_points(**kw):
        if kw.get("group") == "koordfw.commands":
            return [_EntryPoint()]
        return real(**kw)

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    args = parse(["--log-format", "json", "hello", "--log-level", "info", "--name", "x"])
    assert (args.command, args.name, args.log_level, args.log_format) == ("hello", "x", "info", "json")
    args = parse(["--log-level", "error", "hello", "loud", "--log-format", "console"])
    assert (args.hello_command, args.log_level, args.log_format) == ("loud", "error", "console")


def test_main_configures_logging_from_either_side(monkeypatch):
    seen = []
    monkeypatch.setattr("koordfw.log.configure", lambda fmt, level: seen.append((fmt, level)))
    assert cli.main(["plugins", "--log-level", "debug", "--log-format", "json"]) == 0
    assert cli.main(["--log-level", "info", "plugins"]) == 0
    assert seen == [("json", "debug"), ("auto", "info")]


def test_agent_add_on_commands_get_them():
    """Entry points of koordfw.agent_commands (gpu_share's `agent devices`, when installed)."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    agent_sub = next(a for a in sub.choices["agent"]._actions if isinstance(a, argparse._SubParsersAction))
    extra = sorted(set(agent_sub.choices) - {"plan"})
    if not extra:
        pytest.skip("no koordfw.agent_commands entry point installed")
    for name in extra:
        args = parser.parse_args(["--log-level", "error", "agent", name, "--log-format", "json"])
        assert (args.agent_command, args.log_level, args.log_format) == (name, "error", "json")
