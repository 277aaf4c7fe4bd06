"""docs/hooks.md is checked against koordfw/hookspecs.py: the same sections and hooks in the same order,
each under a heading giving its signature, a ``*Calls: ...*`` line that says "first result" exactly for
the ``firstresult`` specs, then the spec's docstring verbatim.

The format, per section and per hook::

    ## <section title>               (hookspecs.SECTIONS)

    ### `name(arg, arg, ...)`        (the spec's arguments, in order)

    *Calls: <how the kernel calls the implementations>.*

    <the spec's docstring>
"""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path

import pytest

from koordfw import hookspecs

DOC_PATH = Path(__file__).resolve().parents[1] / "docs" / "hooks.md"

SECTION_RE = re.compile(r"^## (?P<title>.+)$")
HOOK_RE = re.compile(r"^### `(?P<name>\w+)\((?P<args>[\w, ]*)\)`$")
CALLS_RE = re.compile(r"^\*Calls: (?P<text>.+)\.\*$")


def parse(text: str) -> dict[str, dict[str, dict]]:
    """{section title: {hook name: {"args": [...], "calls": str, "body": str}}}, in document order.
    Every heading after the first ``##`` (outside fenced code) must be a section or a hook heading."""
    sections: dict[str, dict[str, dict]] = {}
    hook: dict | None = None
    fenced = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            pass
        elif line.startswith("## "):
            m = SECTION_RE.match(line)
            sections[m["title"]] = {}
            hook = None
            continue
        elif line.startswith("#") and sections:
            m = HOOK_RE.match(line)
            assert m, f"docs/hooks.md:{lineno}: not a hook heading `name(arg, ...)`: {line!r}"
            section = sections[next(reversed(sections))]
            assert m["name"] not in section, f"docs/hooks.md:{lineno}: {m['name']} documented twice"
            hook = section[m["name"]] = {"args": [a.strip() for a in m["args"].split(",") if a.strip()],
                                         "calls": None, "body": []}
            continue
        if hook is None:
            continue
        if hook["calls"] is None:
            if not line.strip():
                continue
            m = CALLS_RE.match(line)
            assert m, f"docs/hooks.md:{lineno}: the line after a hook heading must be *Calls: ...*, got {line!r}"
            hook["calls"] = m["text"]
            continue
        hook["body"].append(line)
    for section in sections.values():
        for h in section.values():
            h["body"] = "\n".join(h["body"]).strip()
    return sections


@functools.cache
def doc() -> dict[str, dict[str, dict]]:
    return parse(DOC_PATH.read_text())


def doc_hook(name: str) -> dict:
    for section in doc().values():
        if name in section:
            return section[name]
    raise AssertionError(f"docs/hooks.md does not document {name}")


def test_doc_sections_are_the_specs_sections_in_order():
    assert list(doc()) == list(hookspecs.SECTIONS)


@pytest.mark.parametrize("title", list(hookspecs.SECTIONS))
def test_doc_section_lists_exactly_its_hooks_in_order(title):
    assert tuple(doc().get(title, {})) == hookspecs.SECTIONS[title]


def test_doc_lists_every_hook_once_in_spec_order():
    assert tuple(name for section in doc().values() for name in section) == hookspecs.HOOK_NAMES


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_doc_signature_is_the_specs(name):
    spec_args = list(inspect.signature(getattr(hookspecs, name)).parameters)
    args = doc_hook(name)["args"]
    assert args == spec_args, f"docs/hooks.md: {name}({', '.join(args)}), the spec: {name}({', '.join(spec_args)})"


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_doc_says_first_result_exactly_for_firstresult_specs(name):
    firstresult = bool(getattr(hookspecs, name).koordfw_spec.get("firstresult"))
    calls = doc_hook(name)["calls"]
    assert calls.startswith("first result") == firstresult, f"{name}: *Calls: {calls}.*"
    assert ("first result" in calls) == firstresult, f"{name}: *Calls: {calls}.*"


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_doc_text_is_the_spec_docstring(name):
    assert doc_hook(name)["body"] == inspect.getdoc(getattr(hookspecs, name))


def test_parser_refuses_a_malformed_hook_heading():
    with pytest.raises(AssertionError, match="not a hook heading"):
        parse("## Scheduling cycle\n\n### queue_sort(pod)\n")
    with pytest.raises(AssertionError, match=r"\*Calls"):
        parse("## Scheduling cycle\n\n### `queue_sort(pod)`\n\nno calls line\n")
