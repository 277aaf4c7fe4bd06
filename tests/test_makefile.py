"""The README's two commands (issue 32 point 10): ``make simulate`` installs only what running needs (no
test, lint, kubernetes or plot extras), ``make test`` adds them; CI runs ``make test``."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = (ROOT / "Makefile").read_text()


def recipe(target: str) -> tuple[str, list[str]]:
    """The prerequisites and recipe lines of ``target``."""
    m = re.search(rf"^{re.escape(target)}:([^\n]*)\n((?:\t[^\n]*\n)*)", MAKEFILE, re.M)
    assert m, f"no rule for {target}"
    return m.group(1).strip(), [line.strip() for line in m.group(2).splitlines()]


def test_make_simulate_installs_without_extras():
    deps, _ = recipe("simulate")
    assert deps == "install-run"
    deps, _ = recipe("install-run")
    assert deps == "$(RUN_STAMP)"
    _, lines = recipe("$(RUN_STAMP)")
    pip = [line for line in lines if "pip install" in line and "-e" in line]
    assert pip and all("[" not in line for line in pip), pip  # no extras


def test_make_test_installs_the_extras_and_lints_first():
    deps, _ = recipe("test")
    assert deps.split() == ["install", "lint"]
    _, lines = recipe("$(STAMP)")
    assert any("'.[test,kubernetes,bench]'" in line for line in lines)
    assert "make test" in (ROOT / ".ci" / "run").read_text()
