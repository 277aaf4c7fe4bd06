"""The lint configuration covers every plugin package: a package missing from the import contracts or
the type checker's files would not be checked at all (``make lint`` passes without looking at it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())


def plugin_packages() -> dict[str, str]:
    """Import name → its source directory (relative to the repository), for every ``plugins/*`` package."""
    out = {}
    for pyproject in sorted((ROOT / "plugins").glob("*/pyproject.toml")):
        name = f"koordfw_{pyproject.parent.name}"
        assert (pyproject.parent / name / "__init__.py").is_file(), f"{pyproject.parent} has no package {name}"
        out[name] = f"plugins/{pyproject.parent.name}/{name}"
    return out


def contract(name_start: str) -> dict:
    [c] = [c for c in CONFIG["tool"]["importlinter"]["contracts"] if c["name"].startswith(name_start)]
    return c


@pytest.mark.parametrize("where, listed", [
    ("importlinter root_packages", lambda: CONFIG["tool"]["importlinter"]["root_packages"]),
    ("contract: plugins import no engine", lambda: contract("Plugins import no engine")["source_modules"]),
    ("contract: the core only through the public API", lambda: contract("Plugins, the built-ins")["source_modules"]),
    ("contract: plugins independent", lambda: contract("Plugins use one another")["modules"]),
])
def test_every_plugin_package_is_in_the_import_contracts(where, listed):
    missing = sorted(set(plugin_packages()) - set(listed()))
    assert not missing, f"pyproject.toml {where} lacks {missing}"


def test_every_plugin_package_is_type_checked():
    files = set(CONFIG["tool"]["mypy"]["files"])
    missing = sorted(d for d in plugin_packages().values() if d not in files)
    assert not missing, f"pyproject.toml [tool.mypy] files lacks {missing}"
