"""docs/plugins/risk_budget.md's worked example against the code (see tests/test_risk_budget.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from koordfw.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "plugins" / "risk_budget.md"


def _explain(capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["explain", "node", "node-r", str(ROOT / "examples" / "risk_budget")]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_docs_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/plugins/risk_budget.md's worked example: its explain output is the command's, and its table's
    results are the numbers above."""
    text = DOC.read_text()
    for line in _explain(capsys):
        assert line in text
    for needle in ("q = 1000 + 9000 + 25 = **10025**", "16000 − 1000 − 1000 − 10025 = **3975**",
                   "3975 − 2000 = **1975**", "**7025**", "6975 − 2000 = **4975**", "35Gi − 5Mi",
                   "31Gi − 5Mi", "16000 − 6400 − 1000 − 5000 = **3600**"):
        assert needle in text, needle
    assert re.search(r"riskBudget: \{cpu: 0\.05, memory: 0\.01\}", text)
