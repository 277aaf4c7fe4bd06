"""API credentials that change under a running client: the projected service-account token (a file the
kubelet rewrites), kubeconfig exec credential plugins with an expiry, and the fake API server's token
authentication (401 for an unknown or expired token). Clocks are injected; nothing waits on time."""

from __future__ import annotations

import json
import sys
import textwrap

import anyio
import pytest
from kube_testkit import pod

from koordfw.engines.kube.client import ApiError, ExecCredentialPlugin, KubeClient, TokenFile
from koordfw.engines.kube.reflector import Reflector
from koordfw.testing.fake_apiserver import FakeApiServer


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


async def test_fake_answers_401_for_unknown_and_expired_tokens():
    wall = Clock(100.0)
    async with FakeApiServer(tokens={"good": None, "short": 150.0}, clock=wall) as api:
        for token, ok in (("good", True), ("short", True), ("nope", False)):
            async with KubeClient(api.url, token=token, qps=0) as c:
                if ok:
                    await c.request("GET", "/api/v1/nodes")
                else:
                    with pytest.raises(ApiError) as ei:
                        await c.request("GET", "/api/v1/nodes")
                    assert ei.value.status == 401 and ei.value.reason == "Unauthorized"
                    assert ei.value.message == "Unauthorized"
        wall.t = 150.0  # "short" has expired on the server's clock
        async with KubeClient(api.url, token="short", qps=0) as c:
            with pytest.raises(ApiError) as ei:
                await c.request("GET", "/api/v1/nodes")
            assert ei.value.status == 401
            assert c.unauthorized == 1  # a fixed token cannot change: not retried
        async with KubeClient(api.url, qps=0) as c:  # no token at all
            with pytest.raises(ApiError):
                await c.request("GET", "/api/v1/nodes")
        assert api.rejected_tokens == ["nope", "short", ""]


async def test_token_file_is_reread_every_minute_and_at_once_on_a_401(tmp_path):
    path = tmp_path / "token"
    path.write_text("t1\n")
    clock = Clock()
    async with FakeApiServer(tokens={"t1": None}) as api:
        source = TokenFile(path, clock=clock)
        async with KubeClient(api.url, token_source=source, qps=0, clock=clock) as c:
            await c.request("GET", "/api/v1/nodes")
            assert source.reads == 1
            # the kubelet rotates the projected token and the old one stops working
            api.issue_token("t2")
            api.revoke_token("t1")
            path.write_text("t2\n")
            clock.t += 10  # within the minute: the cached t1 is sent, refused, then the file re-read
            await c.request("GET", "/api/v1/nodes")
            assert source.reads == 2 and api.rejected_tokens == ["t1"] and c.unauthorized == 1
            # a minute later the file is re-read before the request, without a 401
            api.issue_token("t3")
            path.write_text("t3")
            clock.t += 60
            await c.request("GET", "/api/v1/nodes")
            assert source.reads == 3 and api.rejected_tokens == ["t1"]
            assert (await source.token()) == "t3"


async def test_token_file_unreadable_keeps_the_last_token_or_names_the_file(tmp_path):
    clock = Clock()
    missing = TokenFile(tmp_path / "absent", clock=clock)
    with pytest.raises(ApiError) as ei:
        await missing.token()
    assert ei.value.status == 0 and "absent" in ei.value.message
    path = tmp_path / "token"
    path.write_text("keep")
    source = TokenFile(path, clock=clock)
    assert await source.token() == "keep"
    path.unlink()
    assert await source.token(refresh=True) == "keep"


def _plugin_script(tmp_path) -> str:
    """An exec credential plugin: token N on its Nth run, expiring N * 10 minutes after $EXPIRES_BASE
    (epoch seconds) when that is set."""
    script = tmp_path / "plugin.py"
    script.write_text(textwrap.dedent(f"""
        import datetime, json, os, pathlib
        info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
        assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False
        counter = pathlib.Path({str(tmp_path / "runs")!r})
        n = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(n))
        status = {{"token": f"tok-{{n}}"}}
        if os.environ.get("EXPIRES_BASE"):
            at = datetime.datetime.fromtimestamp(float(os.environ["EXPIRES_BASE"]) + 600 * n, datetime.UTC)
            status["expirationTimestamp"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}}))
    """))
    return str(script)


async def test_exec_plugin_reruns_when_its_credential_expires_and_on_a_401(tmp_path):
    wall = Clock(1_767_225_600.0)  # 2026-01-01T00:00:00Z
    cfg = {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
           "args": [_plugin_script(tmp_path)], "env": [{"name": "EXPIRES_BASE", "value": str(wall.t)}]}
    plugin = ExecCredentialPlugin(cfg, wall=wall)
    async with FakeApiServer(tokens={"tok-1": None, "tok-2": None, "tok-3": None}) as api:
        async with KubeClient(api.url, token_source=plugin, qps=0) as c:
            await c.request("GET", "/api/v1/nodes")
            await c.request("GET", "/api/v1/nodes")
            assert plugin.runs == 1  # reused until it expires
            wall.t += 600  # the expirationTimestamp has come
            await c.request("GET", "/api/v1/nodes")
            assert plugin.runs == 2 and api.rejected_tokens == []
            api.revoke_token("tok-2")  # revoked early: the 401 re-runs the plugin, the request is retried
            await c.request("GET", "/api/v1/nodes")
            assert plugin.runs == 3 and api.rejected_tokens == ["tok-2"]
            assert await plugin.token() == "tok-3"


async def test_exec_plugin_concurrent_requests_share_one_run(tmp_path):
    cfg = {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
           "args": [_plugin_script(tmp_path)]}
    plugin = ExecCredentialPlugin(cfg)
    async with FakeApiServer(tokens={"tok-1": None}) as api, KubeClient(api.url, token_source=plugin, qps=0) as c:
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(c.request, "GET", "/api/v1/nodes")
    assert plugin.runs == 1


@pytest.mark.parametrize("cfg,msg", [
    ({"apiVersion": "client.authentication.k8s.io/v1"}, "command is required"),
    ({"command": "x", "apiVersion": "v9"}, "apiVersion 'v9'"),
    ({"command": "x", "apiVersion": "client.authentication.k8s.io/v1", "interactiveMode": "Always"},
     "interactive terminal"),
    ({"command": "x", "apiVersion": "client.authentication.k8s.io/v1", "env": [{"name": 3}]}, "env[0]"),
])
def test_exec_plugin_config_errors_name_the_field(cfg, msg):
    with pytest.raises(ValueError, match="kubeconfig user exec") as ei:
        ExecCredentialPlugin(cfg)
    assert msg in str(ei.value)


@pytest.mark.parametrize("stdout,msg", [
    ("not json", "printed no JSON ExecCredential"),
    (json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                 "status": {"token": "x"}}), "plugin returned version client.authentication.k8s.io/v1beta1"),
    (json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {}}),
     "status.token is missing"),
    (json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                 "status": {"token": "x", "expirationTimestamp": "soon"}}), "not an RFC 3339 time"),
])
async def test_exec_plugin_bad_output_is_a_retryable_error_naming_the_plugin(tmp_path, stdout, msg):
    script = tmp_path / "bad.py"
    script.write_text(f"print({stdout!r})")
    plugin = ExecCredentialPlugin({"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                                   "args": [str(script)]})
    with pytest.raises(ApiError) as ei:
        await plugin.token()
    assert ei.value.status == 0 and ei.value.retryable and msg in ei.value.message


async def test_exec_plugin_failure_quotes_stderr(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import sys; sys.stderr.write('login expired'); sys.exit(3)")
    plugin = ExecCredentialPlugin({"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                                   "args": [str(script)]})
    with pytest.raises(ApiError, match="exited with status 3: login expired"):
        await plugin.token()


async def test_from_kubeconfig_uses_the_exec_plugin(tmp_path):
    import yaml

    async with FakeApiServer(tokens={"tok-1": None, "tok-2": None}) as api:
        kc = api.kubeconfig()
        kc["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                                           "args": [_plugin_script(tmp_path)]}}
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(kc))
        c = await KubeClient.from_kubeconfig(str(path), qps=0)
        async with c:
            assert isinstance(c.token_source, ExecCredentialPlugin)
            await c.request("GET", "/api/v1/nodes")
        # kubernetes_asyncio ran it once while loading the file, the client once for its first request
        assert (tmp_path / "runs").read_text() == "2"
        assert api.rejected_tokens == []


async def test_reflector_keeps_watching_across_a_token_rotation(tmp_path):
    """After expiry the reflector's reconnects carry the new token: no back-off loop on 401s."""
    path = tmp_path / "token"
    path.write_text("old")
    async with FakeApiServer(tokens={"old": None}, bookmark_interval=0.2) as api:
        async with KubeClient(api.url, token_source=TokenFile(path), qps=0) as c:
            seen = []

            async def handler(t, obj, old):
                seen.append((t, obj["metadata"]["name"]))

            r = Reflector(c, "/api/v1/pods", handler, initial_backoff=0.01)
            async with anyio.create_task_group() as tg:
                tg.start_soon(r.run)
                with anyio.fail_after(5):
                    await r.synced.wait()
                api.issue_token("new")
                api.revoke_token("old")
                path.write_text("new")
                api.drop_watches()  # the open stream ends; the re-watch meets a 401 with the cached token
                api.create(pod("after"))
                with anyio.fail_after(5):
                    while ("ADDED", "after") not in seen:
                        await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
            assert api.rejected_tokens == ["old"] and r.errors == 0


async def test_from_kubeconfig_token_file_is_relative_to_the_kubeconfig(tmp_path):
    import yaml

    (tmp_path / "tok").write_text("from-file")
    async with FakeApiServer(tokens={"from-file": None}) as api:
        kc = api.kubeconfig()
        kc["users"][0]["user"] = {"tokenFile": "tok"}
        (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kc))
        c = await KubeClient.from_kubeconfig(str(tmp_path / "kubeconfig"), qps=0)
        async with c:
            assert isinstance(c.token_source, TokenFile) and c.token_source.path == tmp_path / "tok"
            await c.request("GET", "/api/v1/nodes")


async def test_in_cluster_reads_the_projected_token_file(tmp_path, monkeypatch):
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a CA certificate")
    ca = tmp_path / "ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "ca.key"),
                    "-out", str(ca), "-subj", "/CN=test-ca", "-days", "1"], check=True, capture_output=True)
    token = tmp_path / "token"
    token.write_text("sa-token-1")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    clock = Clock()
    c = KubeClient.in_cluster(token_file=str(token), ca_file=str(ca), qps=0, clock=clock)
    async with c:
        assert c.base_url == "https://10.0.0.1:443"
        assert isinstance(c.token_source, TokenFile)
        assert await c.token_source.token() == "sa-token-1"
        token.write_text("sa-token-2")  # the kubelet rotated it
        clock.t += 60
        assert await c.token_source.token() == "sa-token-2"


def test_scheduler_with_an_unusable_exec_stanza_exits_2_with_one_line(tmp_path, capsys):
    import yaml

    from koordfw.cli import main

    kc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
          "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:1"}}],
          "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
          "users": [{"name": "u", "user": {"exec": {
              "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "interactiveMode": "Always",
              "args": ["-c", 'print(\'{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
                             '"status": {"token": "x"}}\')']}}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kc))
    assert main(["scheduler", "--kubeconfig", str(path), "--health-address", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("koordfw: error: kubeconfig user exec: ") and "interactive terminal" in err[-1]
