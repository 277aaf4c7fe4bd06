"""Typos on the command line (issue 32 point 11): the subcommand that was given an unknown option says so
with its own usage and the closest option; an unknown command gets the closest command; exit 2."""

from __future__ import annotations

import pytest

from koordfw.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return int(e.value.code or 0), capsys.readouterr().err


def test_a_misspelt_option_names_the_subcommand_and_the_option_meant(capsys):
    code, err = run(["simulate", "examples/colocation", "--profle", "p.yaml"], capsys)
    assert code == 2
    assert "usage: koordfw simulate" in err
    assert "koordfw simulate: error: unrecognized arguments: --profle p.yaml (did you mean --profile?)" in err


def test_a_misspelt_option_of_a_nested_command(capsys):
    code, err = run(["agent", "plan", "--state", "s.json", "--confg", "a.yaml"], capsys)
    assert code == 2
    assert "koordfw agent plan: error: unrecognized arguments: --confg a.yaml (did you mean --config?)" in err


def test_a_misspelt_command_gets_the_closest(capsys):
    code, err = run(["simulat", "x"], capsys)
    assert code == 2
    assert "invalid choice: 'simulat'" in err and "did you mean 'simulate'?" in err


def test_nothing_close_suggests_nothing(capsys):
    code, err = run(["simulate", "x", "--zzzzzz"], capsys)
    assert code == 2
    assert err.rstrip().endswith("unrecognized arguments: --zzzzzz")
