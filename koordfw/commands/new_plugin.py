"""``koordfw new-plugin NAME [DIR]``: write a plugin package that ``pip install -e`` makes visible."""

from __future__ import annotations

import argparse
import keyword
import re
from pathlib import Path

from ..command_api import Commands
from ..core.errors import KoordfwError

PYPROJECT = '''[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "koordfw-{dash}"
version = "0.1.0"
description = "A koordfw plugin: {name}"
requires-python = ">=3.11"
dependencies = ["koordfw"]

[project.entry-points.koordfw]
{name} = "koordfw_{name}"

[tool.hatch.build.targets.wheel]
packages = ["koordfw_{name}"]
'''

MODULE = '''"""{name}: a koordfw plugin.

Hooks are plain (or async) functions marked with ``@hookimpl``; take only the arguments you need.
"""

from koordfw import hookimpl

LABEL = "example.com/{dash}"


@hookimpl
def filter(pod, nodes):
    """Reject nodes labelled ``{{LABEL}}=off``."""
    return {{n.name: f"node(s) have {{LABEL}}=off" for n in nodes if n.labels.get(LABEL) == "off"}}


@hookimpl
def score(pod, nodes):
    """Prefer nodes labelled ``{{LABEL}}=preferred``."""
    return {{n.name: 100 if n.labels.get(LABEL) == "preferred" else 0 for n in nodes}}
'''

TEST = '''from koordfw import simulate
from koordfw.inputs import Manifests, make_node, make_pod


def test_{name}_steers_pods():
    nodes = [make_node("off", labels={{"example.com/{dash}": "off"}}),
             make_node("plain"),
             make_node("preferred", labels={{"example.com/{dash}": "preferred"}})]
    pods = [make_pod(f"p{{i}}", requests={{"cpu": "100m"}}) for i in range(3)]
    result = simulate(Manifests(nodes=nodes, pods=pods))
    assert set(result.placements().values()) == {{"preferred"}}
'''


def register(sub: Commands) -> None:
    p = sub.add("new-plugin", help="write a new plugin package")
    p.add_argument("name", help="plugin name (a Python identifier, e.g. my_policy)")
    p.add_argument("dir", nargs="?", help="target directory (default: ./NAME)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    name = args.name
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise KoordfwError(f"plugin name {name!r} must be a lowercase Python identifier (e.g. my_policy)")
    target = Path(args.dir or name)
    if target.exists() and any(target.iterdir()):
        raise KoordfwError(f"{target}: directory exists and is not empty")
    dash = name.replace("_", "-")
    (target / f"koordfw_{name}").mkdir(parents=True, exist_ok=True)
    (target / "tests").mkdir(exist_ok=True)
    (target / "pyproject.toml").write_text(PYPROJECT.format(name=name, dash=dash))
    (target / f"koordfw_{name}" / "__init__.py").write_text(MODULE.format(name=name, dash=dash))
    (target / "tests" / f"test_{name}.py").write_text(TEST.format(name=name, dash=dash))
    (target / "README.md").write_text(f"# koordfw-{dash}\n\nA koordfw plugin. Install with `pip install -e .`, "
                                      f"then `koordfw plugins` lists `{name}`.\n")
    print(f"wrote plugin {name!r} in {target}/ (install: pip install -e {target})")
    return 0
