"""A malformed line on a watch stream is a retryable ApiError: the reflector logs it and re-watches
from its last resourceVersion (no re-list), and later events still arrive."""

from __future__ import annotations

import json

import anyio
import pytest
from aiohttp import web
from structlog.testing import capture_logs

from koordfw.engines.kube.client import ApiError, KubeClient
from koordfw.engines.kube.reflector import Reflector

PATH = "/api/v1/pods"


def _pod(name: str, rv: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": str(rv)}}


def _line(etype: str, obj: dict) -> bytes:
    return json.dumps({"type": etype, "object": obj}).encode() + b"\n"


class StubServer:
    """LIST answers an empty list at RV 5; the n-th WATCH streams ``streams[n]`` (raw bytes) and
    then stays open until the client leaves. Records each watch's resourceVersion parameter."""

    def __init__(self, streams: list[bytes]) -> None:
        self.streams = streams
        self.watch_rvs: list[str] = []
        self.lists = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "1":
            self.lists += 1
            return web.json_response({"kind": "PodList", "apiVersion": "v1",
                                      "metadata": {"resourceVersion": "5"}, "items": []})
        n = len(self.watch_rvs)
        self.watch_rvs.append(request.query.get("resourceVersion", ""))
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        await resp.write(self.streams[n] if n < len(self.streams) else b"")
        await anyio.sleep(3600)
        return resp

    async def __aenter__(self) -> StubServer:
        app = web.Application()
        app.router.add_get(PATH, self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


GARBAGE = [
    ("not json", b"<html>502 Bad Gateway</html>\n"),
    ("truncated", b'{"type": "ADDED", "object": {"metadata"\n'),
    ("not an object", b"42\n"),
    ("object not a dict", b'{"type": "ADDED", "object": "pod"}\n'),
]


@pytest.mark.parametrize("garbage", [g for _, g in GARBAGE], ids=[n for n, _ in GARBAGE])
async def test_reflector_survives_a_malformed_watch_line(garbage):
    first = _line("ADDED", _pod("p1", 6)) + garbage + _line("ADDED", _pod("lost-in-broken-stream", 7))
    second = _line("ADDED", _pod("p2", 8))
    seen: list[tuple[str, str]] = []

    async def handler(etype, obj, old):
        seen.append((etype, obj["metadata"]["name"]))

    async with StubServer([first, second]) as srv, KubeClient(srv.url, qps=0) as client:
        r = Reflector(client, PATH, handler, name="pods", initial_backoff=0.01, max_backoff=0.05)
        with capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                tg.start_soon(r.run)
                with anyio.fail_after(5):
                    while ("ADDED", "p2") not in seen:
                        await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
    assert seen == [("ADDED", "p1"), ("ADDED", "p2")]
    assert srv.lists == 1 and r.relists == 1, "a bad line must not force a re-list"
    assert srv.watch_rvs[:2] == ["5", "6"], "the re-watch resumes from the last resourceVersion"
    assert r.errors == 1 and r.resource_version == "8"
    warn = [e for e in logs if e["log_level"] == "warning" and e.get("reflector") == "pods"]
    assert warn and PATH in warn[0]["error"] and "watch" in warn[0]["error"]


async def test_client_watch_raises_retryable_api_error_naming_the_path():
    async with StubServer([b"garbage\n"]) as srv, KubeClient(srv.url, qps=0) as client:
        with pytest.raises(ApiError) as ei:
            with anyio.fail_after(5):
                async for _ in client.watch(PATH, {"resourceVersion": "5"}, timeout=30):
                    pass
    assert ei.value.status == 0 and ei.value.retryable
    assert f"watch {PATH}: malformed event line" in str(ei.value) and "garbage" in str(ei.value)
