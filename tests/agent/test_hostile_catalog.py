"""Every hostile input of ``hostile_cases`` (issue 16) through ``koordfw agent plan --state F`` (or
``koordfw agent`` for the flag cases) in an isolated child: exit 0, or exit 2 with one error line naming
the file and the field; never a traceback, a hang or a memory blow-up. Cases with fields to name must be
errors. ``python -m tests.agent.hostile_cases -v`` prints the same as a table."""

from __future__ import annotations

import pytest

from koordfw.core.plugins import Registry
from koordfw.testing.hostile import check_cli_outcome, run_cli

from .hostile_cases import AGENT_CASES, argv_of, cases, write_inputs


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    Registry().load()  # import every plugin once in the parent, so each forked run is fast
    return write_inputs(tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize("case", [pytest.param(c, id=f"{c.cls}: {c.name}") for c in cases()])
def test_hostile_input(case, inputs, tmp_path):
    state = tmp_path / "state.yaml"
    state.write_bytes(case.content)
    argv = argv_of(case, str(state), inputs)
    if case.argv and case.argv[0] in AGENT_CASES:
        blame: list[str] = []
    elif case.argv and case.argv[0] == "--config":
        blame = [inputs[case.argv[1][1:-1]]]
    else:
        blame = [str(state)]
    outcome = run_cli(argv, timeout=20)
    result = check_cli_outcome(outcome, names=[*blame, *(case.names or ())], max_seconds=15)
    if case.names is not None:
        assert result == "error", outcome.describe()
        assert outcome.stderr.rstrip("\n").splitlines()[-1].startswith("koordfw: error:"), outcome.describe()
