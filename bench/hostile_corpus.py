"""Count how ``koordfw`` copes with the hostile inputs of ``tests/hostile_cases.py``, on any source tree.

    .venv/bin/python bench/hostile_corpus.py                 # this checkout
    .venv/bin/python bench/hostile_corpus.py --tree /tmp/old # another checkout (e.g. a git worktree of an
                                                             # older commit), put first on PYTHONPATH

Each case runs as ``python -m koordfw ...`` in a fresh process under a 2 GiB address-space limit and a
timeout, and is classed as: expected (exit 0 or a clean exit-2 line naming the file and field, as the case
asks), traceback, hang, memory, wrong-outcome (exit 0 where an error was due, an error that names the
wrong thing, or an error where the input was valid). The table is per class of input.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from hostile_cases import CASES  # noqa: E402


def _limit(memory: int):
    def pre() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return pre


def classify(case, rc: int | None, stdout: str, stderr: str, timed_out: bool) -> str:
    if timed_out:
        return "hang"
    if "MemoryError" in stderr or rc in (-9, 137):
        return "memory"
    if "Traceback" in stderr:
        return "traceback"
    if case.expect == "ok":
        return "expected" if rc == 0 and all(f'"{k.split("/")[1]}"' in stdout for k in case.bound) else "wrong-outcome"
    lines = [ln for ln in stderr.splitlines() if ln.startswith("koordfw: error:")]
    if rc == 2 and len(lines) == 1 and all(n in lines[0] for n in case.names):
        return "expected"
    return "wrong-outcome"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", help="source tree to put first on PYTHONPATH (default: the installed koordfw)")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--memory", type=int, default=2 * 2**30)
    ap.add_argument("-v", "--verbose", action="store_true", help="print each case's outcome")
    args = ap.parse_args()
    env = dict(os.environ)
    if args.tree:
        env["PYTHONPATH"] = str(Path(args.tree).resolve())
    by_class: dict[str, Counter] = defaultdict(Counter)
    t0 = time.monotonic()
    for case in CASES:
        with tempfile.TemporaryDirectory() as d:
            for name, content in case.files.items():
                p = Path(d) / name
                (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
            argv = [a.replace("{dir}", d) for a in case.argv]
            try:
                r = subprocess.run([sys.executable, "-m", "koordfw", *argv], env=env, cwd=d, capture_output=True, text=True,
                                   timeout=args.timeout, preexec_fn=_limit(args.memory), errors="replace")
                outcome = classify(case, r.returncode, r.stdout, r.stderr, False)
                tail = (r.stderr.strip().splitlines() or [""])[-1][:110]
            except subprocess.TimeoutExpired:
                outcome, tail = "hang", f"killed after {args.timeout:g}s"
        by_class[case.cls][outcome] += 1
        if args.verbose:
            print(f"{outcome:14} {case.cls:12} {case.name:45} {tail}")
    kinds = ("expected", "traceback", "hang", "memory", "wrong-outcome")
    print(f"\n{'class':12} {'inputs':>6} " + " ".join(f"{k:>13}" for k in kinds))
    for cls, c in by_class.items():
        print(f"{cls:12} {sum(c.values()):>6} " + " ".join(f"{c[k]:>13}" for k in kinds))
    total = sum(by_class.values(), Counter())
    print(f"{'all':12} {sum(total.values()):>6} " + " ".join(f"{total[k]:>13}" for k in kinds))
    print(f"({time.monotonic() - t0:.0f}s, tree {args.tree or 'installed'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
