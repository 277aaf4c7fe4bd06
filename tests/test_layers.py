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


def test_the_embedding_api_exports_no_kernel_type():
    """``Scheduler`` and ``ClusterState`` are the kernel's: an embedder drives ``EmbeddedEngine``'s methods."""
    import koordfw
    import koordfw.embed

    for module in (koordfw, koordfw.embed):
        for name in ("Scheduler", "ClusterState", "SchedulingQueue", "HookCaller"):
            assert name not in module.__all__ and not hasattr(module, name), f"{module.__name__}.{name}"


# an engine's kernel attributes and the scheduler's cycle, as a plugin package would reach them
KERNEL_REACH = (".scheduler.", "engine.scheduler", "engine.cluster", "schedule_next(", "cluster_event(",
                "ClusterState", "set_extra_allocatable(", "add_requested(")


@pytest.mark.parametrize("package", sorted(plugin_packages()))
def test_plugin_packages_drive_engines_through_their_public_methods(package):
    """The replays, defrag's command and every plugin use ``EmbeddedEngine``'s methods and its read-only
    ``view``, never the scheduler or the mutable state inside it."""
    src = ROOT / plugin_packages()[package]
    found = [f"{p.relative_to(ROOT)}:{i}: {needle}" for p in sorted(src.rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) for needle in KERNEL_REACH if needle in line]
    assert not found, "\n".join(found)
