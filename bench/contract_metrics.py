"""Static figures of the kernel's shape (issue 31's before/after): exported names, core file sizes, hook
points run outside the runtime, ``Any`` in the hookspecs, unannotated hookimpls, module-level mutable state.

    .venv/bin/python bench/contract_metrics.py [--json]

Reads the source with ``ast``; imports only ``koordfw`` (for ``__all__``).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTABLE_CALLS = {"dict", "list", "set", "OrderedDict", "defaultdict", "deque", "Counter", "WeakKeyDictionary",
                 "WeakValueDictionary", "WeakSet"}


def sources() -> list[Path]:
    out = sorted((ROOT / "koordfw").rglob("*.py"))
    for pkg in sorted((ROOT / "plugins").iterdir()):
        out += sorted(p for p in pkg.rglob("*.py") if "tests" not in p.parts)
    return [p for p in out if "testing" not in p.relative_to(ROOT).parts[:2]]


def is_hookimpl(dec: ast.expr) -> bool:
    node = dec.func if isinstance(dec, ast.Call) else dec
    return (isinstance(node, ast.Name) and node.id == "hookimpl") or \
        (isinstance(node, ast.Attribute) and node.attr == "hookimpl")


def unannotated(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    params = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    params = [a for a in params if a.arg not in ("self", "cls")]
    return fn.returns is None or any(a.annotation is None for a in params)


def mutable_value(v: ast.expr | None) -> bool:
    if isinstance(v, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(v, ast.Call):
        f = v.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        return name in MUTABLE_CALLS
    return False


MUTATORS = {"append", "add", "pop", "popitem", "clear", "update", "setdefault", "extend", "insert", "remove",
            "discard", "appendleft", "popleft", "move_to_end"}


def module_state(tree: ast.Module) -> list[str]:
    """Module-level names bound to a mutable container that code in the module writes to (an item
    assigned or deleted, or a mutating method called): state that outlives every engine."""
    names: set[str] = set()
    for node in tree.body:
        targets: list[ast.expr] = []
        value = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        if mutable_value(value):
            names |= {t.id for t in targets if isinstance(t, ast.Name) and t.id != "__all__"}
    written: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Subscript) and isinstance(n.ctx, (ast.Store, ast.Del)) and isinstance(n.value, ast.Name):
            written.add(n.value.id)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in MUTATORS \
                and isinstance(n.func.value, ast.Name):
            written.add(n.func.value.id)
    return sorted(names & written)


HOOK_RUNNERS = ("call_sync", "call_async", "call_first", "call_all", ".hook.", "impls(")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import koordfw

    core_sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
                  for p in sorted((ROOT / "koordfw" / "core").glob("*.py"))}
    hookspecs = (ROOT / "koordfw" / "hookspecs.py").read_text()
    spec_tree = ast.parse(hookspecs)
    any_in_specs = sum(1 for n in ast.walk(spec_tree) if isinstance(n, ast.Name) and n.id == "Any")
    impls = unann = 0
    state: dict[str, list[str]] = {}
    runners: dict[str, int] = {}
    for p in sources():
        text = p.read_text()
        tree = ast.parse(text)
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(map(is_hookimpl, fn.decorator_list)):
                impls += 1
                unann += unannotated(fn)
        names = module_state(tree)
        if names:
            state[str(p.relative_to(ROOT))] = names
        rel = str(p.relative_to(ROOT))
        if rel not in ("koordfw/core/runtime.py", "koordfw/core/node_runtime.py", "koordfw/core/caller.py",
                       "koordfw/core/plugins.py"):
            n = sum(text.count(r) for r in HOOK_RUNNERS)
            if n:
                runners[rel] = n
    out = {
        "exported_names": len(koordfw.__all__),
        "core_files_over_600_lines": {k: v for k, v in core_sizes.items() if v > 600},
        "largest_core_file": max(core_sizes.values()),
        "hook_calls_outside_runtime": runners,
        "hook_calls_outside_runtime_total": sum(runners.values()),
        "any_in_hookspecs": any_in_specs,
        "hookimpls": impls,
        "unannotated_hookimpls": unann,
        "module_level_mutable_state": state,
        "module_level_mutable_state_total": sum(len(v) for v in state.values()),
    }
    if a.json:
        print(json.dumps(out, indent=2))
        return 0
    for k, v in out.items():
        print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
