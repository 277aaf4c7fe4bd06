"""Meta-tests (datasette's habit): every hook is documented under its exact signature and tested."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from koordfw import hookspecs

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "hooks.md").read_text()


def _test_names() -> set[str]:
    out = set()
    for f in (ROOT / "tests").rglob("test_*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                out.add(node.name)
    return out


TESTS = _test_names()


def test_hook_names_match_the_specs():
    specs = {n for n, f in vars(hookspecs).items() if callable(f) and hasattr(f, "koordfw_spec")}
    assert specs == set(hookspecs.HOOK_NAMES)


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_every_hook_is_documented_with_its_signature(name):
    params = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
    assert f"### `{name}({params})`" in DOC, f"docs/hooks.md lacks the heading for {name}({params})"


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_every_hook_has_a_test(name):
    assert any(t == f"test_hook_{name}" or t.startswith(f"test_hook_{name}_") for t in TESTS), \
        f"no test_hook_{name} in tests/"


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_every_hook_has_a_full_docstring(name):
    doc = inspect.getdoc(getattr(hookspecs, name)) or ""
    assert len(doc) > 80 and ("async" in doc.lower() or "sync only" in doc.lower()), name
