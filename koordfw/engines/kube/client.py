"""The one HTTP client that talks to the Kubernetes API.

It is a thin aiohttp session over raw JSON, configured from a kubeconfig or the in-cluster service
account through ``kubernetes_asyncio.config`` (imported lazily: the kernel runs without it). Raw
JSON rather than the generated models keeps the hot paths (list, watch, binding) cheap, and avoids
the generated ``create_namespaced_pod_binding``, which fails to decode the server's ``Status``
reply (kubernetes-client/python#547). Every request passes a client-side token bucket (QPS/burst).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import structlog

from .ratelimit import TokenBucket

log = structlog.get_logger("koordfw.kube")


class ApiError(Exception):
    """A non-2xx answer. ``status`` is the HTTP code (0 for a transport error), ``body`` the parsed reply."""

    def __init__(self, status: int, message: str, body: Any = None, reason: str = "") -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status, self.message, self.body, self.reason = status, message, body, reason

    @property
    def retryable(self) -> bool:
        return self.status == 0 or self.status == 429 or self.status >= 500


class KubeClient:
    """An API client. ``base_url`` like ``https://10.0.0.1:6443``; ``qps <= 0`` disables rate limiting."""

    def __init__(self, base_url: str, *, token: str | None = None, ssl_context: ssl.SSLContext | bool | None = None,
                 qps: float = 50.0, burst: int = 100, user_agent: str = "koordfw",
                 headers: Mapping[str, str] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.limiter = TokenBucket(qps, burst)
        self._headers = {"User-Agent": user_agent, "Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._headers.update(headers or {})
        self._ssl = ssl_context
        self._session: aiohttp.ClientSession | None = None
        self.request_count = 0

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    async def from_kubeconfig(cls, path: str | None = None, *, context: str | None = None,
                              **kw: Any) -> KubeClient:
        """Load a kubeconfig file (``None``: $KUBECONFIG or ~/.kube/config)."""
        try:
            from kubernetes_asyncio import client as k8s_client
            from kubernetes_asyncio import config as k8s_config
        except ImportError as e:  # pragma: no cover - depends on the install
            raise RuntimeError("the Kubernetes engine needs kubernetes_asyncio: pip install 'koordfw[kubernetes]'") from e
        cfg = k8s_client.Configuration()
        await k8s_config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
        return cls._from_configuration(cfg, **kw)

    @classmethod
    def in_cluster(cls, **kw: Any) -> KubeClient:
        """Use the pod's service account (KUBERNETES_SERVICE_HOST and the mounted token)."""
        try:
            from kubernetes_asyncio import client as k8s_client
            from kubernetes_asyncio import config as k8s_config
        except ImportError as e:  # pragma: no cover
            raise RuntimeError("the Kubernetes engine needs kubernetes_asyncio: pip install 'koordfw[kubernetes]'") from e
        cfg = k8s_client.Configuration()
        k8s_config.load_incluster_config(client_configuration=cfg)
        return cls._from_configuration(cfg, **kw)

    @classmethod
    def _from_configuration(cls, cfg: Any, **kw: Any) -> KubeClient:
        token = None
        auth = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        if auth:
            prefix = (cfg.api_key_prefix or {}).get("authorization", "")
            token = auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else auth
            if prefix and prefix.lower() != "bearer":
                token = None
        ctx: ssl.SSLContext | bool | None = None
        if cfg.host.startswith("https"):
            if not cfg.verify_ssl:
                ctx = False
            else:
                ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
                if cfg.cert_file:
                    ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
                if getattr(cfg, "tls_server_name", None):
                    ctx.check_hostname = True
        headers = {}
        if cfg.username and cfg.password and not token:
            import base64

            headers["Authorization"] = "Basic " + base64.b64encode(f"{cfg.username}:{cfg.password}".encode()).decode()
        return cls(cfg.host, token=token, ssl_context=ctx, headers=headers, **kw)

    # -- session ------------------------------------------------------------------------------------
    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            conn = aiohttp.TCPConnector(limit=0, ssl=self._ssl if self._ssl is not None else True)
            self._session = aiohttp.ClientSession(headers=self._headers, connector=conn,
                                                  timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # -- requests -----------------------------------------------------------------------------------
    async def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                      body: Any = None, content_type: str = "application/json", timeout: float = 30.0,
                      limited: bool = True) -> Any:
        """One request; returns the parsed JSON reply or raises ApiError (status 0 for transport errors)."""
        if limited:
            await self.limiter.acquire()
        self.request_count += 1
        data = None if body is None else json.dumps(body)
        try:
            async with self._sess().request(method, self.base_url + path, params=_params(params), data=data,
                                            headers={"Content-Type": content_type} if data else None,
                                            timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as e:
            raise ApiError(0, f"{method} {path}: {type(e).__name__}: {e}") from None
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        if 200 <= status < 300:
            return parsed
        msg = parsed.get("message", "") if isinstance(parsed, dict) else str(parsed)[:500]
        reason = parsed.get("reason", "") if isinstance(parsed, dict) else ""
        raise ApiError(status, msg or f"{method} {path}", parsed, reason)

    async def watch(self, path: str, params: Mapping[str, Any], *, timeout: float) -> AsyncIterator[dict]:
        """Open a watch and yield its events; raises ApiError for a non-200 answer, a broken stream or a
        malformed event line (status 0, retryable)."""
        await self.limiter.acquire()
        self.request_count += 1
        p = dict(params)
        p["watch"] = "1"
        try:
            async with self._sess().get(self.base_url + path, params=_params(p),
                                        timeout=aiohttp.ClientTimeout(total=timeout + 30, sock_read=timeout + 30)) as resp:
                if resp.status != 200:
                    raw = await resp.read()
                    try:
                        parsed = json.loads(raw)
                    except ValueError:
                        parsed = {"message": raw.decode(errors="replace")[:500]}
                    raise ApiError(resp.status, parsed.get("message", ""), parsed, parsed.get("reason", ""))
                buf = b""
                async for chunk in resp.content.iter_any():
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        if line.strip():
                            yield _decode_event(path, line)
                if buf.strip():
                    yield _decode_event(path, buf)
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as e:
            raise ApiError(0, f"watch {path}: {type(e).__name__}: {e}") from None


def _decode_event(path: str, line: bytes) -> dict:
    """One line of a watch stream as an event object; a line that is not a JSON object (a proxy's
    garbage, a truncated write) is a retryable ApiError (status 0), so the watcher re-watches from
    its last resourceVersion instead of dying."""
    try:
        ev = json.loads(line)
    except ValueError as e:
        raise ApiError(0, f"watch {path}: malformed event line ({e}): {line[:200]!r}") from None
    if not isinstance(ev, dict) or not isinstance(ev.get("object", {}), dict):
        raise ApiError(0, f"watch {path}: event is not a {{type, object}} JSON object: {line[:200]!r}")
    return ev


def _params(p: Mapping[str, Any] | None) -> dict[str, str] | None:
    if not p:
        return None
    out = {}
    for k, v in p.items():
        if v is None:
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out
