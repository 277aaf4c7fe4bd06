"""Every plugin under plugins/ installs on its own and is discovered through its entry point.

Each package is installed with pip into an empty target directory (no dependencies, as an
installed koordfw provides them) and a separate interpreter, seeing only that directory besides
koordfw's own environment, must find the plugin's entry point in that package's metadata and load it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_DIRS = sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))

PROBE = """
import json, sys
from importlib import metadata
target = sys.argv[1]
found = {}
for dist in metadata.distributions(path=[target]):
    for ep in dist.entry_points:
        if ep.group == "koordfw":
            obj = ep.load()
            found[ep.name] = {"dist": dist.metadata["Name"], "module": getattr(obj, "__module__", obj.__name__),
                              "file": sys.modules[ep.value.split(":")[0]].__file__}
print(json.dumps(found))
"""


@pytest.mark.parametrize("plugin_dir", PLUGIN_DIRS, ids=lambda p: p.name)
def test_plugin_installs_on_its_own(plugin_dir: Path, tmp_path: Path) -> None:
    meta = tomllib.loads((plugin_dir / "pyproject.toml").read_text())
    declared = meta["project"]["entry-points"]["koordfw"]
    assert plugin_dir.name in declared, "the entry point is named after the plugin folder"
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(plugin_dir)], check=True, capture_output=True)
    out = subprocess.run([sys.executable, "-c", PROBE, str(target)], capture_output=True, text=True,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert set(found) == set(declared)
    for name, info in found.items():
        assert info["dist"] == meta["project"]["name"]
        assert info["file"].startswith(str(target)), f"{name} was loaded from {info['file']}, not the install"
