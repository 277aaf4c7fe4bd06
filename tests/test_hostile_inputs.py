"""Issue #16's classes of hostile input, each with its minimal input: the outcome is exit 0 or one
exit-2 line naming the file and field, in bounded time and memory, never a traceback."""

from __future__ import annotations

import json

import pytest
from hostile_cases import CASES

from koordfw.testing.hostile import check_cli_outcome, run_cli


def write_case(case, tmp_path):
    for name, content in case.files.items():
        p = tmp_path / name
        (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
    return [a.replace("{dir}", str(tmp_path)) for a in case.argv]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input(case, tmp_path):
    out = run_cli(write_case(case, tmp_path), timeout=30)
    result = check_cli_outcome(out, names=case.names, max_seconds=20)
    assert result == case.expect, out.describe()
    if case.bound:
        pods = {f"{p['namespace']}/{p['name']}": p for p in json.loads(out.stdout)["pods"]}
        for key in case.bound:
            assert pods[key]["phase"] == "Bound", pods[key]
