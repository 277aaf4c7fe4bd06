"""Profiles, plugin discovery and the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from koordfw import ConfigError, hookimpl
from koordfw.cli import main
from koordfw.core.plugins import Registry
from koordfw.core.profile import load_profile, profile_from_dict

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "colocation"


def registry(profile: dict, **extra):
    return Registry(profile_from_dict(profile)).load(autoload=False, extra=extra or None)


class A:
    @hookimpl
    def score(self, nodes):
        return None


class B:
    @hookimpl
    def score(self, nodes):
        return None


def names(reg, point):
    return [(i.plugin, i.weight) for i in reg.impls(point)]


def test_order_follows_kubernetes_merge_rule():
    reg = registry({"plugins": {"score": {"enabled": [{"name": "b", "weight": 3}, "a"]}}}, a=A(), b=B())
    # defaults first (built-ins, then in-process plugins), enabled ones moved to the end in their order
    assert names(reg, "score")[-2:] == [("b", 3), ("a", 1)]
    reg = registry({"plugins": {"score": {"disabled": [{"name": "*"}], "enabled": ["b", "a"]}}}, a=A(), b=B())
    assert names(reg, "score") == [("b", 1), ("a", 1)]
    reg = registry({"plugins": {"score": {"disabled": ["a"]}}}, a=A(), b=B())
    assert "a" not in [n for n, _ in names(reg, "score")]


def test_disable_everywhere_and_camel_case_points():
    reg = registry({"disable": ["node_selector"], "plugins": {"preScore": {"disabled": ["taint_toleration"]}}})
    assert "node_selector" not in reg.plugins
    assert [i.plugin for i in reg.impls("pre_score")] == []


@pytest.mark.parametrize("profile,message", [
    ({"plugins": {"score": {"enabled": ["no_such_plugin"]}}}, "unknown plugin 'no_such_plugin'; available:"),
    ({"pluginConfig": {"ghost": {}}}, "unknown plugin 'ghost'"),
    ({"pluginConfig": {"node_resources_fit": {"scoringStrategy": "Fastest"}}}, "invalid args for plugin 'node_resources_fit'"),
    ({"pluginConfig": {"node_resources_fit": {"typo": 1}}}, "typo"),
    ({"pluginConfig": {"default_preemption": {"minCandidateNodesPercentage": "many"}}},
     "pluginConfig.default_preemption.minCandidateNodesPercentage"),
    ({"pluginConfig": {"default_binder": {"x": 1}}}, "takes no args"),
    ({"plugins": {"sc0re": {}}}, "plugins.sc0re: unknown hook point"),
    ({"percentageOfNodesToScore": 150}, "between 0 and 100"),
    ({"bogusField": 1}, "unknown profile field"),
    ({"plugins": {"score": {"enabled": [{"name": "a", "weight": -1}]}}}, "non-negative integer"),
])
def test_bad_profiles_name_what_is_wrong(profile, message):
    with pytest.raises(ConfigError) as e:
        registry(profile, a=A())
    assert message in str(e.value)


def test_profile_file_errors(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("plugins: [\n")
    with pytest.raises(ConfigError, match="p.yaml: not valid YAML"):
        load_profile(f)
    with pytest.raises(ConfigError, match="cannot read profile"):
        load_profile(tmp_path / "missing.yaml")


def test_kubernetes_style_plugin_config_list():
    prof = profile_from_dict({"pluginConfig": [{"name": "node_resources_fit",
                                                "args": {"scoringStrategy": "MostAllocated"}}]})
    reg = Registry(prof).load(autoload=False)
    assert reg.args["node_resources_fit"].scoring_strategy == "MostAllocated"


def test_unknown_hook_in_plugin_is_an_error():
    class Typo:
        @hookimpl
        def filtr(self, nodes):
            return None

    with pytest.raises(ConfigError, match="implements unknown hook.*filtr"):
        Registry().load(autoload=False, extra={"typo": Typo()})


# -- the command line --------------------------------------------------------------------------------

def test_simulate_json_contract(capsys):
    rc = main(["simulate", str(EXAMPLE / "00-nodes.yaml"), str(EXAMPLE / "10-services.yaml"), "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert set(out) >= {"pods", "nodes", "summary"}
    assert set(out["pods"][0]) == {"namespace", "name", "node", "phase", "reason", "annotations", "labels",
                                   "priorityClassName", "priority", "schedulerName", "containers"}
    assert set(out["nodes"][0]) == {"name", "allocatable", "requested", "pods"}
    assert set(out["summary"]) >= {"bound", "pending", "seconds", "pods_per_second"}
    assert out["summary"]["bound"] + out["summary"]["pending"] == len(out["pods"])


def test_simulate_is_deterministic_for_a_seed(capsys):
    args = ["simulate", str(EXAMPLE / "00-nodes.yaml"), str(EXAMPLE / "10-services.yaml"), "-o", "json", "--seed", "3"]
    main(args)
    a = json.loads(capsys.readouterr().out)
    main(args)
    b = json.loads(capsys.readouterr().out)
    assert [p["node"] for p in a["pods"]] == [p["node"] for p in b["pods"]]


def test_simulate_yaml_and_table_outputs(capsys):
    import yaml

    assert main(["simulate", str(EXAMPLE / "00-nodes.yaml"), "-o", "yaml"]) == 0
    assert "nodes" in yaml.safe_load(capsys.readouterr().out)
    assert main(["simulate", str(EXAMPLE / "00-nodes.yaml"), str(EXAMPLE / "10-services.yaml")]) == 0
    assert "placements" in capsys.readouterr().out


def test_bad_manifest_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: a, resources: {requests: {memory: 1Gx}}}]}\n")
    p = subprocess.run([sys.executable, "-m", "koordfw", "simulate", str(bad)], capture_output=True, text=True)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert "bad.yaml: Pod default/web: field spec.containers[0].resources.requests.memory" in p.stderr


def test_bad_profile_exits_2(tmp_path):
    prof = tmp_path / "profile.yaml"
    prof.write_text("pluginConfig:\n  nope: {}\n")
    p = subprocess.run([sys.executable, "-m", "koordfw", "simulate", str(EXAMPLE / "00-nodes.yaml"), "--profile",
                        str(prof)], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown plugin 'nope'" in p.stderr and "Traceback" not in p.stderr


def test_plugins_listing_json(capsys):
    assert main(["plugins", "-o", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["node_resources_fit"]["distribution"] == "koordfw"
    assert set(rows["node_resources_fit"]["hooks"]) >= {"filter", "score", "plugin_args"}


# -- third-party plugins through the entry point -------------------------------------------------------

PLUGIN_PYPROJECT = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
[project]
name = "koordfw-zone-pin"
version = "1.2.3"
[project.entry-points.koordfw]
zone_pin = "koordfw_zone_pin"
[tool.hatch.build.targets.wheel]
packages = ["koordfw_zone_pin"]
"""

PLUGIN_MODULE = '''
from koordfw import hookimpl

@hookimpl
def filter(pod, nodes):
    return {n.name: "zone_pin: wrong zone" for n in nodes if n.labels.get("topology.kubernetes.io/zone") != "zone-b"}
'''

BROKEN_MODULE = "raise ImportError('missing native library')\n"


def _install(tmp_path: Path, name: str, module_src: str, dist: str) -> Path:
    src = tmp_path / f"src-{name}"
    (src / f"koordfw_{name}").mkdir(parents=True)
    (src / "pyproject.toml").write_text(PLUGIN_PYPROJECT.replace("zone_pin", name).replace("zone-pin", dist))
    (src / f"koordfw_{name}" / "__init__.py").write_text(module_src)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(src)], check=True, capture_output=True)
    return target


def _koordfw(target: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(target))
    return subprocess.run([sys.executable, "-m", "koordfw", *args], capture_output=True, text=True, env=env)


def test_third_party_plugin_from_installed_package(tmp_path):
    target = _install(tmp_path, "zone_pin", PLUGIN_MODULE, "zone-pin")
    listing = json.loads(_koordfw(target, "plugins", "-o", "json").stdout)
    row = next(r for r in listing if r["name"] == "zone_pin")
    assert (row["distribution"], row["version"], row["hooks"]) == ("koordfw-zone-pin", "1.2.3", ["filter"])
    out = _koordfw(target, "simulate", str(EXAMPLE / "00-nodes.yaml"), str(EXAMPLE / "10-services.yaml"), "-o", "json")
    data = json.loads(out.stdout)
    placed = {p["node"] for p in data["pods"] if p["node"]}
    new_ones = {p["node"] for p in data["pods"] if p["name"] in ("cart-0", "cart-1")}
    assert new_ones <= {"node-c", "node-d"} and placed
    # disabled by name, and by the autoload switch
    out = _koordfw(target, "plugins", "-o", "json", "--disable", "zone_pin")
    assert "zone_pin" not in {r["name"] for r in json.loads(out.stdout)}
    env = dict(os.environ, PYTHONPATH=str(target), KOORDFW_DISABLE_PLUGIN_AUTOLOAD="1")
    out = subprocess.run([sys.executable, "-m", "koordfw", "plugins", "-o", "json"], capture_output=True, text=True,
                         env=env)
    assert "zone_pin" not in {r["name"] for r in json.loads(out.stdout)}


def test_broken_plugin_is_reported_and_others_load(tmp_path):
    target = _install(tmp_path, "broken", BROKEN_MODULE, "broken")
    out = _koordfw(target, "plugins", "-o", "json")
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["broken"]["distribution"] == "koordfw-broken"
    assert "missing native library" in rows["broken"]["error"]
    assert "node_resources_fit" in rows
    strict = _koordfw(target, "plugins", "--strict-plugins")
    assert strict.returncode == 2 and "plugin 'broken' from distribution 'koordfw-broken' failed to load" in strict.stderr


def test_new_plugin_scaffold_installs_and_passes_its_test(tmp_path):
    target_dir = tmp_path / "my_policy"
    assert main(["new-plugin", "my_policy", str(target_dir)]) == 0
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(target_dir)], check=True, capture_output=True)
    listing = json.loads(_koordfw(site, "plugins", "-o", "json").stdout)
    assert any(r["name"] == "my_policy" and r["hooks"] == ["filter", "score"] for r in listing)
    env = dict(os.environ, PYTHONPATH=str(site))
    t = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(target_dir / "tests")],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    assert t.returncode == 0, t.stdout + t.stderr
    assert main(["new-plugin", "Bad-Name", str(tmp_path / "x")]) == 2
