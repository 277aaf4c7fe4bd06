"""The one way hooks are called.

``call`` runs one implementation: it passes the arguments the implementation asked for by name,
awaits what is awaitable, enforces the per-plugin timeout, and turns an exception into a
``PluginFailure`` carrying an Error ``Status`` that names the plugin. Time spent inside plugin bodies
is accumulated per (plugin, hook) so the kernel's own overhead can be measured.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import time
import types
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import structlog

from .errors import KoordfwError
from .plugins import Impl, Registry
from .status import Status

log = structlog.get_logger("koordfw")

#: the plugin whose hook is running; ``koordfw.log`` adds it to every record logged meanwhile
CURRENT_PLUGIN: contextvars.ContextVar[str | None] = contextvars.ContextVar("koordfw_plugin", default=None)


@types.coroutine
def _resume(coro: Any, yielded: Any) -> Any:
    """Continue a coroutine that was started with ``send(None)`` and suspended (yielding ``yielded``),
    exactly as ``await`` would: values and exceptions (cancellation) are passed through."""
    while True:
        try:
            sent = yield yielded
        except BaseException as exc:  # noqa: BLE001 - cancellation must reach the plugin
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            yielded = coro.send(sent)
        except StopIteration as stop:
            return stop.value


async def _finish(coro: Any, timeout: float) -> Any:
    """Run a coroutine eagerly; only if it suspends does the rest run under the timeout scope
    (a cancel scope costs ~10 µs, and most in-memory hooks finish without suspending)."""
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return stop.value
    with anyio.fail_after(timeout):
        return await _resume(coro, yielded)


#: result types that are never awaitable (checked by exact type: subclasses take the full check)
_PLAIN: frozenset[type] = frozenset((bool, int, float, str, tuple, list, dict, set, frozenset, Status))


class PluginFailure(Exception):
    """Raised by ``HookCaller.call`` when a plugin raised or timed out."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status


class HookCaller:
    """Calls hooks for one engine; ``handle_for(plugin)`` makes the ``handle`` each plugin is given
    (its own: plugin name and args are per plugin), once per plugin."""

    def __init__(self, registry: Registry, handle_for: Callable[[str], Any]) -> None:
        self.registry = registry
        self._handle_for = handle_for
        self.handles: dict[str, Any] = {}
        #: (plugin, hook) -> [calls, seconds]
        self.durations: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
        self.plugin_seconds = 0.0
        #: id(impl) -> (impl, its plugin's handle, its durations entry), made on its first call
        self._prep: dict[int, tuple[Impl, Any, list[float]]] = {}

    def impls(self, point: str) -> list[Impl]:
        return self.registry.impls(point)

    def handle(self, plugin: str) -> Any:
        """The handle ``plugin`` is given."""
        h = self.handles.get(plugin)
        if h is None:
            h = self.handles[plugin] = self._handle_for(plugin)
        return h

    def _prepare(self, impl: Impl) -> tuple[Impl, Any, list[float]]:
        p = self._prep[id(impl)] = (impl, self.handle(impl.plugin), self.durations[(impl.plugin, impl.point)])
        return p

    async def call(self, impl: Impl, **kw: Any) -> Any:
        p = self._prep.get(id(impl))
        if p is None or p[0] is not impl:  # the identity check: an id may be reused after an impl is gone
            p = self._prepare(impl)
        kw["args"] = impl.args
        kw["handle"] = p[1]
        try:
            kwargs = {a: kw[a] for a in impl.argnames}
        except KeyError as e:  # an implementation asked for an argument this call site does not have
            raise PluginFailure(Status.error(f"kernel did not pass {e} to {impl.plugin}.{impl.point}",
                                             impl.plugin)) from None
        token = CURRENT_PLUGIN.set(impl.plugin)
        t0 = time.perf_counter()
        try:
            if impl.is_async:
                return await _finish(impl.fn(**kwargs), impl.timeout)
            if impl.threaded:
                with anyio.fail_after(impl.timeout):
                    return await anyio.to_thread.run_sync(functools.partial(impl.fn, **kwargs),
                                                          abandon_on_cancel=True)
            res = impl.fn(**kwargs)
            if res is None or type(res) in _PLAIN:  # most hooks: no awaitable check needed
                return res
            if inspect.iscoroutine(res):
                return await _finish(res, impl.timeout)
            if inspect.isawaitable(res):
                with anyio.fail_after(impl.timeout):
                    res = await res
            return res
        except TimeoutError:
            msg = f"plugin {impl.plugin} timed out after {impl.timeout:g}s in {impl.point}"
            log.error("plugin timed out", plugin=impl.plugin, hook=impl.point, timeout=impl.timeout)
            raise PluginFailure(Status.error(msg, impl.plugin)) from None
        except PluginFailure:
            raise
        except Exception as e:
            msg = f"plugin {impl.plugin} raised {type(e).__name__} in {impl.point}: {e}"
            # a KoordfwError is bad data the plugin met (it names the object and field): no traceback;
            # anything else is a bug in the plugin, and its traceback is what its author needs
            log.error("plugin raised", plugin=impl.plugin, hook=impl.point, error=f"{type(e).__name__}: {e}",
                      exc_info=not isinstance(e, KoordfwError))
            raise PluginFailure(Status.error(msg, impl.plugin)) from e
        finally:
            dt = time.perf_counter() - t0
            CURRENT_PLUGIN.reset(token)
            d = p[2]
            d[0] += 1
            d[1] += dt
            self.plugin_seconds += dt

    async def call_safe(self, point: str, **kw: Any) -> list[tuple[Impl, Any, Status | None]]:
        """Call every implementation; a failing plugin is logged and reported, the others still run."""
        out: list[tuple[Impl, Any, Status | None]] = []
        for impl in self.impls(point):
            try:
                out.append((impl, await self.call(impl, **kw), None))
            except PluginFailure as f:
                out.append((impl, None, f.status))
        return out
