"""The one HTTP client that talks to the Kubernetes API.

It is a thin aiohttp session over raw JSON, configured from a kubeconfig or the in-cluster service
account through ``kubernetes_asyncio.config`` (imported lazily: the kernel runs without it). Raw
JSON rather than the generated models keeps the hot paths (list, watch, binding) cheap, and avoids
the generated ``create_namespaced_pod_binding``, which fails to decode the server's ``Status``
reply (kubernetes-client/python#547). Every request passes a client-side token bucket (QPS/burst).

Bearer tokens come from a :class:`TokenSource`, asked before every request: a fixed token, a token file
re-read every minute (the in-cluster projected service-account token, which the kubelet rotates, or a
kubeconfig ``tokenFile``), or a kubeconfig ``exec`` credential plugin re-run when its
``ExecCredential.status.expirationTimestamp`` passes. A 401 makes the source refresh at once (re-read
the file, re-run the plugin) and the request is retried once with the new token, as client-go's
transport wrappers do. The client also records when the API last answered (``last_success``) and since
when it has not (``unreachable_since``), which ``/healthz`` reports; a run of 401s counts as unreachable
until a request is answered otherwise (events on watches opened before the token was revoked do not end
it: the process can read but no longer write).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import anyio
import structlog

from ...core.errors import KoordfwError
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

    @property
    def too_large_resource_version(self) -> bool:
        """The apiserver's "Too large resource version" answer (a 504 Timeout with the
        ``ResourceVersionTooLarge`` cause, or only the message from servers before 1.18.6), as
        client-go's ``isTooLargeResourceVersionError``."""
        if self.status != 504:
            return False
        body = self.body if isinstance(self.body, dict) else {}
        causes = (body.get("details") or {}).get("causes") or []
        if any(isinstance(c, dict) and c.get("reason") == "ResourceVersionTooLarge" for c in causes):
            return True
        return "Too large resource version" in self.message


# -- credentials ------------------------------------------------------------------------------------

class KubeConfigError(KoordfwError, ValueError):
    """Unusable connection settings (a kubeconfig, its exec stanza, the in-cluster environment); the CLI
    reports the message on one line and exits 2."""


#: where the kubelet mounts the pod's projected service-account token
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_ACCOUNT_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"


class TokenSource(Protocol):
    """Where bearer tokens come from. ``token()`` is asked before every request and must be cheap when
    nothing changed; ``token(refresh=True)`` after the API answered 401 for the last one: fetch a new one
    now (re-read, re-run). ``refreshable`` says whether a refresh can give a different token (a fixed
    token cannot, so a 401 is not retried)."""

    refreshable: bool

    async def token(self, *, refresh: bool = False) -> str: ...


class StaticToken:
    """One fixed token (``--token``-like configuration, tests)."""

    refreshable = False

    def __init__(self, token: str) -> None:
        self._token = token

    async def token(self, *, refresh: bool = False) -> str:
        return self._token


class TokenFile:
    """A token read from a file and re-read every ``period`` seconds (client-go re-reads the projected
    service-account token every minute: the kubelet rewrites it well before it expires) or at once after
    a 401. If a re-read fails, the token read last is kept (and the error logged); if there is none yet,
    the request fails with a retryable ApiError (status 0) that names the file."""

    refreshable = True

    def __init__(self, path: str | os.PathLike[str], *, period: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self.period, self._clock = Path(path), period, clock
        self._token: str | None = None
        self._read_at = 0.0
        self.reads = 0

    async def token(self, *, refresh: bool = False) -> str:
        now = self._clock()
        if self._token is None or refresh or now - self._read_at >= self.period:
            try:
                text = self.path.read_text(encoding="utf-8").strip()
                if not text:
                    raise ValueError("the file is empty")
            except (OSError, ValueError) as e:
                if self._token is None:
                    raise ApiError(0, f"cannot read the API token from {self.path}: {e}") from None
                log.warning("cannot re-read the API token; keeping the previous one", file=str(self.path),
                            error=str(e))
                self._read_at = now
                return self._token
            self._token, self._read_at = text, now
            self.reads += 1
        return self._token


def _parse_rfc3339(value: str, what: str) -> float:
    try:
        ts = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{what}: not an RFC 3339 time: {value!r}") from None
    if ts.tzinfo is None:
        raise ValueError(f"{what}: RFC 3339 time without a zone: {value!r}")
    return ts.timestamp()


class ExecCredentialPlugin:
    """A kubeconfig ``users[].user.exec`` credential plugin (client-go's ``exec`` authenticator).

    The command runs without a terminal with ``KUBERNETES_EXEC_INFO`` set and the stanza's ``env``
    added; it must print an ``ExecCredential`` of the configured ``apiVersion`` with ``status.token``.
    The token is reused until ``status.expirationTimestamp`` has passed on ``wall`` (no timestamp:
    until the API answers 401), then the plugin runs again; concurrent requests share one run. A
    failing plugin (exit status, no token, bad JSON, timeout) is a retryable ApiError (status 0) whose
    message names the command and quotes its stderr."""

    refreshable = True

    def __init__(self, config: Mapping[str, Any], *, base_dir: str | os.PathLike[str] | None = None,
                 wall: Callable[[], float] = time.time, timeout: float = 60.0) -> None:
        command = config.get("command")
        if not isinstance(command, str) or not command:
            raise KubeConfigError("kubeconfig user exec: command is required")
        api_version = config.get("apiVersion")
        if api_version not in ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"):
            raise KubeConfigError(f"kubeconfig user exec: apiVersion {api_version!r} is not "
                             "client.authentication.k8s.io/v1 or v1beta1")
        if config.get("interactiveMode") == "Always":
            raise KubeConfigError(f"kubeconfig user exec: {command} needs an interactive terminal "
                             "(interactiveMode: Always), which a server process does not have")
        # a command with a path separator is relative to the kubeconfig's directory (client-go ResolvePaths)
        if base_dir is not None and os.sep in command and not os.path.isabs(command):
            command = os.path.join(base_dir, command)
        args = config.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise KubeConfigError("kubeconfig user exec: args must be a list of strings")
        env: dict[str, str] = {}
        for i, item in enumerate(config.get("env") or []):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) \
                    or not isinstance(item.get("value", ""), str):
                raise KubeConfigError(f"kubeconfig user exec: env[{i}] must have a string name and value")
            env[item["name"]] = item.get("value", "")
        self.argv = [command, *args]
        self.api_version = api_version
        self._env = env
        self._wall, self._timeout = wall, timeout
        self._token: str | None = None
        self._expiry: float | None = None
        self._lock = anyio.Lock()
        self.runs = 0

    def _valid(self) -> bool:
        return self._token is not None and (self._expiry is None or self._wall() < self._expiry)

    async def token(self, *, refresh: bool = False) -> str:
        stale = self._token
        async with self._lock:
            # another request may have refreshed while this one waited for the lock
            if self._token is not None and self._valid() and (not refresh or self._token != stale):
                return self._token
            await self._run()
            assert self._token is not None
            return self._token

    async def _run(self) -> None:
        name = self.argv[0]
        env = dict(os.environ)
        env.update(self._env)
        env["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": self.api_version, "kind": "ExecCredential",
                                                  "spec": {"interactive": False}})
        try:
            with anyio.fail_after(self._timeout):
                proc = await anyio.run_process(self.argv, env=env, check=False)
        except TimeoutError:
            raise ApiError(0, f"exec credential plugin {name} did not finish in {self._timeout:g}s") from None
        except OSError as e:
            raise ApiError(0, f"exec credential plugin {name} could not run: {e}") from None
        self.runs += 1
        stderr = proc.stderr.decode(errors="replace").strip()[-500:]
        if proc.returncode != 0:
            raise ApiError(0, f"exec credential plugin {name} exited with status {proc.returncode}: {stderr}")
        try:
            cred = json.loads(proc.stdout)
        except ValueError as e:
            raise ApiError(0, f"exec credential plugin {name} printed no JSON ExecCredential: {e}") from None
        if not isinstance(cred, dict) or cred.get("kind") != "ExecCredential":
            raise ApiError(0, f"exec credential plugin {name} printed no ExecCredential object")
        if cred.get("apiVersion") != self.api_version:
            raise ApiError(0, f"exec credential plugin {name} is configured to use API version "
                           f"{self.api_version}, plugin returned version {cred.get('apiVersion')}")
        raw_status = cred.get("status")
        status: dict[str, Any] = raw_status if isinstance(raw_status, dict) else {}
        token = status.get("token")
        if not isinstance(token, str) or not token:
            raise ApiError(0, f"exec credential plugin {name}: ExecCredential.status.token is missing "
                           "(client certificates from a plugin are not supported)")
        expiry = None
        if status.get("expirationTimestamp"):
            try:
                expiry = _parse_rfc3339(str(status["expirationTimestamp"]),
                                        f"exec credential plugin {name}: status.expirationTimestamp")
            except ValueError as e:
                raise ApiError(0, str(e)) from None
        self._token, self._expiry = token, expiry


def _kubeconfig_paths(path: str | None) -> list[Path]:
    if path:
        return [Path(path).expanduser()]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    return [Path("~/.kube/config").expanduser()]


def kubeconfig_user(path: str | None, context: str | None) -> tuple[dict, Path | None]:
    """The ``user`` stanza of ``context`` (default: current-context) and the file that defined it, with
    kubectl's merging of $KUBECONFIG's files (the first file that names a context, user or the
    current-context wins). ``({}, None)`` when there is none."""
    from ...core.safeload import InputError, load_yaml, read_text

    current = context
    contexts: dict[str, dict] = {}
    users: dict[str, tuple[dict, Path]] = {}
    for p in _kubeconfig_paths(path):
        if not p.exists():
            continue
        try:
            doc = load_yaml(read_text(p))
        except (OSError, InputError) as e:
            raise KubeConfigError(f"kubeconfig {p}: {e}") from None
        if not isinstance(doc, dict):
            continue
        current = current or doc.get("current-context") or None
        for c in doc.get("contexts") or []:
            if isinstance(c, dict) and isinstance(c.get("name"), str):
                contexts.setdefault(c["name"], c.get("context") or {})
        for u in doc.get("users") or []:
            if isinstance(u, dict) and isinstance(u.get("name"), str):
                users.setdefault(u["name"], (u.get("user") or {}, p))
    ctx = contexts.get(current or "")
    if not isinstance(ctx, dict) or not ctx.get("user"):
        return {}, None
    user, where = users.get(str(ctx["user"]), ({}, None))
    return (user if isinstance(user, dict) else {}), where


class KubeClient:
    """An API client. ``base_url`` like ``https://10.0.0.1:6443``; ``qps <= 0`` disables rate limiting.
    ``token`` is a fixed bearer token, ``token_source`` a :class:`TokenSource` (refreshed as the module
    docstring says); ``clock`` (monotonic seconds) times ``last_success`` and ``unreachable_since``."""

    def __init__(self, base_url: str, *, token: str | None = None, token_source: TokenSource | None = None,
                 ssl_context: ssl.SSLContext | bool | None = None,
                 qps: float = 50.0, burst: int = 100, user_agent: str = "koordfw",
                 headers: Mapping[str, str] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if token and token_source is not None:
            raise ValueError("give token or token_source, not both")
        self.base_url = base_url.rstrip("/")
        self.limiter = TokenBucket(qps, burst)
        self._headers = {"User-Agent": user_agent, "Accept": "application/json"}
        self.token_source: TokenSource | None = StaticToken(token) if token else token_source
        self._headers.update(headers or {})
        self._ssl = ssl_context
        self._session: aiohttp.ClientSession | None = None
        self.request_count = 0
        self.clock = clock
        #: clock time of the last answer from the API (any status but 401, 429 and 5xx); None: none yet
        self.last_success: float | None = None
        #: clock time of the first failed round trip (transport error, 401, 429, 5xx) since the last
        #: answer; None while the API answers
        self.unreachable_since: float | None = None
        #: clock time of the first 401 since a request last got another answer; None: not refused
        self.unauthorized_since: float | None = None
        self.unauthorized = 0
        #: what this client's server serves (:func:`koordfw.engines.kube.discovery.discovery_for`, made on
        #: first use): it lives and dies with the client
        self.discovery: Any = None

    def _answered(self, status: int, *, stream: bool = False) -> None:
        """Record an answer. ``stream``: an event on a watch opened earlier, which shows the API is
        reachable but not that the credentials still work (a watch is authenticated once, when it opens):
        it does not end a run of 401s, which only another answer to a request ends."""
        now = self.clock()
        if status == 0 or status == 401 or status == 429 or status >= 500:
            if self.unreachable_since is None:
                self.unreachable_since = now
            if status == 401 and self.unauthorized_since is None:
                self.unauthorized_since = now
            return
        self.last_success = now
        if stream and self.unauthorized_since is not None:
            return
        self.unreachable_since = self.unauthorized_since = None

    async def _auth(self, refresh: bool = False) -> dict[str, str] | None:
        if self.token_source is None:
            return None
        return {"Authorization": f"Bearer {await self.token_source.token(refresh=refresh)}"}

    def _retry_401(self, status: int, attempt: int) -> bool:
        if status != 401:
            return False
        self.unauthorized += 1
        if attempt == 0 and self.token_source is not None and self.token_source.refreshable:
            log.info("the API answered 401; refreshing the token and retrying once")
            return True
        return False

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
        try:
            await k8s_config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
        except (k8s_config.ConfigException, OSError) as e:
            raise KubeConfigError(f"kubeconfig {path or '(default)'}: {e}") from None
        user, where = kubeconfig_user(path, context)
        source: TokenSource | None = None
        base = where.parent if where is not None else None
        if isinstance(user.get("exec"), dict) and not user.get("token"):
            source = ExecCredentialPlugin(user["exec"], base_dir=base)
        elif isinstance(user.get("tokenFile"), str) and user["tokenFile"] and not user.get("token"):
            tf = Path(user["tokenFile"]).expanduser()
            source = TokenFile(tf if tf.is_absolute() or base is None else base / tf)
        return cls._from_configuration(cfg, token_source=source, **kw)

    @classmethod
    def in_cluster(cls, *, token_file: str = SERVICE_ACCOUNT_TOKEN, ca_file: str = SERVICE_ACCOUNT_CA,
                   **kw: Any) -> KubeClient:
        """Use the pod's service account (KUBERNETES_SERVICE_HOST/PORT, the mounted CA and token; the
        token is re-read every minute and after a 401: the projected token rotates)."""
        try:
            from kubernetes_asyncio import client as k8s_client
            from kubernetes_asyncio import config as k8s_config
        except ImportError as e:  # pragma: no cover
            raise RuntimeError("the Kubernetes engine needs kubernetes_asyncio: pip install 'koordfw[kubernetes]'") from e
        cfg = k8s_client.Configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=cfg, token_filename=token_file,
                                             cert_filename=ca_file)
        except (k8s_config.ConfigException, OSError) as e:
            raise KubeConfigError(f"in-cluster configuration: {e}") from None
        return cls._from_configuration(cfg, token_source=TokenFile(token_file, clock=kw.get("clock", time.monotonic)),
                                       **kw)

    @classmethod
    def _from_configuration(cls, cfg: Any, *, token_source: TokenSource | None = None, **kw: Any) -> KubeClient:
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
        if token_source is not None:
            token = None  # the source supplies (and renews) it
        if cfg.username and cfg.password and not token and token_source is None:
            import base64

            headers["Authorization"] = "Basic " + base64.b64encode(f"{cfg.username}:{cfg.password}".encode()).decode()
        return cls(cfg.host, token=token, token_source=token_source, ssl_context=ctx, headers=headers, **kw)

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
        """One request; returns the parsed JSON reply or raises ApiError (status 0 for transport errors).
        A 401 refreshes the token and retries once."""
        data = None if body is None else json.dumps(body)
        for attempt in range(2):
            if limited:
                await self.limiter.acquire()
            self.request_count += 1
            headers = await self._auth(refresh=attempt > 0) or {}
            if data:
                headers["Content-Type"] = content_type
            try:
                async with self._sess().request(method, self.base_url + path, params=_params(params), data=data,
                                                headers=headers or None,
                                                timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                    raw = await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError, ConnectionError) as e:
                self._answered(0)
                raise ApiError(0, f"{method} {path}: {type(e).__name__}: {e}") from None
            self._answered(status)
            if not self._retry_401(status, attempt):
                break
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
        malformed event line (status 0, retryable). A 401 on opening refreshes the token and retries once."""
        p = dict(params)
        p["watch"] = "1"
        try:
            for attempt in range(2):
                await self.limiter.acquire()
                self.request_count += 1
                headers = await self._auth(refresh=attempt > 0)
                async with self._sess().get(self.base_url + path, params=_params(p), headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=timeout + 30,
                                                                          sock_read=timeout + 30)) as resp:
                    self._answered(resp.status)
                    if self._retry_401(resp.status, attempt):
                        continue
                    if resp.status != 200:
                        raw = await resp.read()
                        try:
                            parsed = json.loads(raw)
                        except ValueError:
                            parsed = {"message": raw.decode(errors="replace")[:500]}
                        if not isinstance(parsed, dict):
                            parsed = {"message": str(parsed)[:500]}
                        raise ApiError(resp.status, parsed.get("message", ""), parsed, parsed.get("reason", ""))
                    buf = b""
                    async for chunk in resp.content.iter_any():
                        buf += chunk
                        while b"\n" in buf:
                            line, buf = buf.split(b"\n", 1)
                            if line.strip():
                                self._answered(200, stream=True)
                                yield _decode_event(path, line)
                    if buf.strip():
                        yield _decode_event(path, buf)
                    return
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as e:
            self._answered(0)
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
