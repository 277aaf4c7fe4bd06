"""The README's ``agent plan`` command runs as written on examples/agent/ and gives what the README says
(issue 32 point 5: the README named a state.json that did not exist)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "koordfw agent plan --state examples/agent/state.json --config examples/agent/agent.yaml"


def test_readme_shows_the_command_as_run() -> None:
    assert f".venv/bin/{COMMAND}" in (ROOT / "README.md").read_text()


def test_agent_plan_on_the_example_node_state() -> None:
    argv = [sys.executable, "-m", "koordfw", *COMMAND.split()[1:]]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    writes = {(w["path"], w["plugin"]): w["value"] for w in plan["writes"]}
    # 65 % of 16 CPUs = 10.4 cores, minus the 8 cores used by what is not BE (11 - 3): 2.4 cores
    assert writes[("cpu/kubepods/besteffort/cpu.cfs_quota_us", "be_suppress")] == "240000"
    # the executor's 3k milli batch-cpu as its pod's CFS quota (100 ms period)
    assert writes[("cpu/kubepods/besteffort/pod9f1c2a3b-exec-1/cpu.cfs_quota_us", "batch_resource")] == "300000"
    schemata = [w["value"] for w in plan["writes"] if w["path"] == "BE/schemata"]
    assert "L3:0=f;1=f;\n" in schemata and "MB:0=50;1=50;\n" in schemata  # 4 of 12 ways, 50 % bandwidth
    # 48Gi of 64Gi is 75 % >= 70 %: the BE executor is evicted, the LS pod is not
    assert [e["pod"] for e in plan["evictions"]] == ["batch/spark-exec-1"]
    assert "75% >= 70%" in plan["evictions"][0]["reason"]
