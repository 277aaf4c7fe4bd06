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
from collections.abc import Callable, Generator
from typing import Any, NoReturn

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


def _raise_failure(impl: Impl, e: Exception) -> NoReturn:
    """The :class:`PluginFailure` for an exception out of ``impl`` (a timeout, a failure, anything else),
    logged; raised from inside the ``except`` clause that caught ``e``."""
    if isinstance(e, TimeoutError):
        msg = f"plugin {impl.plugin} timed out after {impl.timeout:g}s in {impl.point}"
        log.error("plugin timed out", plugin=impl.plugin, hook=impl.point, timeout=impl.timeout)
        raise PluginFailure(Status.error(msg, impl.plugin)) from None
    if isinstance(e, PluginFailure):
        raise e
    msg = f"plugin {impl.plugin} raised {type(e).__name__} in {impl.point}: {e}"
    # a KoordfwError is bad data the plugin met (it names the object and field): no traceback;
    # anything else is a bug in the plugin, and its traceback is what its author needs
    log.error("plugin raised", plugin=impl.plugin, hook=impl.point, error=f"{type(e).__name__}: {e}",
              exc_info=not isinstance(e, KoordfwError))
    raise PluginFailure(Status.error(msg, impl.plugin)) from e


def _positional(fn: Callable[..., Any], argnames: tuple[str, ...]) -> bool:
    """Can ``fn``'s ``argnames`` be given by position, binding exactly as by name? (They are its leading
    parameters, in order; a positional-only one must keep failing as it does when named.)"""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if len(params) < len(argnames):
        return False
    return all(p.name == a and p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p, a in zip(params, argnames))


def _in_thread(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` for a threaded plugin: calling it returns the coroutine that runs ``fn`` in a worker thread
    (abandoned on cancellation, as a timeout does)."""
    def start(*a: Any, **kw: Any) -> Any:
        return anyio.to_thread.run_sync(functools.partial(fn, *a, **kw), abandon_on_cancel=True)

    return start


class Prepared:
    """One implementation made ready for :meth:`HookCaller.call_sync` at one call site (whose arguments
    come by position, named ``passed``): its plugin's handle, args and timing entry bound in.

    When the implementation's arguments are the call site's first ``n`` ones, in that order, followed by
    any of ``args`` and ``handle``, ``fn`` is the function (with those two bound by ``functools.partial``)
    and is called with ``values[:n]``; otherwise (``n`` is -1) with the keyword arguments it names, built
    before its timer starts, as :meth:`HookCaller.call` does. Either way the timed call is the plugin's."""

    __slots__ = ("consts", "durations", "fn", "impl", "missing", "n", "names", "plugin", "sync")

    def __init__(self, impl: Impl, passed: tuple[str, ...], handle: Any, durations: list[float]) -> None:
        self.impl = impl
        self.plugin = impl.plugin
        #: a plain function (an async or threaded one always returns a :class:`Pending` from ``call_sync``)
        self.sync = not impl.is_async and not impl.threaded
        self.durations = durations
        argnames = impl.argnames
        consts = {k: v for k, v in (("args", impl.args), ("handle", handle)) if k in argnames}
        gone = next((a for a in argnames if a not in passed and a not in consts), None)
        #: what :meth:`HookCaller.call` says when the call site lacks an argument the implementation names
        self.missing = None if gone is None else f"kernel did not pass {KeyError(gone)} to {impl.plugin}.{impl.point}"
        given = [a for a in argnames if a not in consts]
        n = len(given)
        if (tuple(given) == passed[:n] and tuple(argnames[:n]) == passed[:n]
                and _positional(impl.fn, argnames[:n])):
            self.n = n
            self.fn: Callable[..., Any] = functools.partial(impl.fn, **consts) if consts else impl.fn
        else:
            self.n = -1
            self.fn = impl.fn
        if impl.threaded:  # called, it starts nothing: the coroutine running it in a worker thread is awaited
            self.fn = _in_thread(self.fn)
        #: (name, position among the call site's values) of the names given by keyword (``n`` -1)
        self.names = tuple((a, passed.index(a)) for a in given if a in passed)
        self.consts = consts

    def arguments(self, values: tuple[Any, ...]) -> dict[str, Any]:
        """The keyword arguments of a call with ``n`` -1."""
        kw = {a: values[i] for a, i in self.names}
        kw.update(self.consts)
        return kw


class Pending:
    """An awaitable result of a plain-function implementation (:meth:`HookCaller.call_sync`): awaiting it
    finishes the call as :meth:`HookCaller.call` does (a coroutine run eagerly, then under the plugin's
    timeout; anything else awaitable under the timeout), then stops its timer."""

    __slots__ = ("caller", "p", "res", "t0", "token")

    def __init__(self, caller: HookCaller, p: Prepared, res: Any, t0: float,
                 token: contextvars.Token[str | None]) -> None:
        self.caller, self.p, self.res, self.t0, self.token = caller, p, res, t0, token

    def __await__(self) -> Generator[Any, None, Any]:
        return self._finish().__await__()

    def discard(self) -> None:
        """Drop the result unawaited (a call site that cannot await): a coroutine is closed, the timer stopped
        and the plugin context reset, as awaiting it would."""
        if inspect.iscoroutine(self.res):
            self.res.close()
        self.caller._done(self.p.durations, self.t0, self.token)

    async def _finish(self) -> Any:
        impl = self.p.impl
        try:
            res = self.res
            if inspect.iscoroutine(res):
                return await _finish(res, impl.timeout)
            with anyio.fail_after(impl.timeout):
                return await res
        except Exception as e:
            _raise_failure(impl, e)
        finally:
            self.caller._done(self.p.durations, self.t0, self.token)


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
        except Exception as e:
            _raise_failure(impl, e)
        finally:
            dt = time.perf_counter() - t0
            CURRENT_PLUGIN.reset(token)
            d = p[2]
            d[0] += 1
            d[1] += dt
            self.plugin_seconds += dt

    def prepared(self, impl: Impl, passed: tuple[str, ...]) -> Prepared:
        """``impl`` made ready for :meth:`call_sync` with the arguments named ``passed``, given by position."""
        p = self._prep.get(id(impl))
        if p is None or p[0] is not impl:
            p = self._prepare(impl)
        return Prepared(impl, passed, p[1], p[2])

    def call_sync(self, p: Prepared, *values: Any) -> Any:
        """:meth:`call` of a prepared implementation without a coroutine: the same arguments, failures,
        plugin context and timing. A result that is awaitable (an async implementation's coroutine, a
        threaded one's worker, a plain function's awaitable) is returned as a :class:`Pending` (its time
        still running, its plugin context still set) for the caller to await, which finishes it as
        :meth:`call` would: the one place that tells the kinds apart."""
        if p.missing is not None:
            raise PluginFailure(Status.error(p.missing, p.plugin))
        n = p.n
        if n < 0:
            kw = p.arguments(values)
        elif n != len(values):
            values = values[:n]
        token = CURRENT_PLUGIN.set(p.plugin)
        t0 = time.perf_counter()
        try:
            res = p.fn(*values) if n >= 0 else p.fn(**kw)
            t1 = time.perf_counter()
        except Exception as e:
            try:
                _raise_failure(p.impl, e)
            finally:
                self._done(p.durations, t0, token)
        except BaseException:
            self._done(p.durations, t0, token)
            raise
        if res is None or type(res) in _PLAIN or not (inspect.iscoroutine(res) or inspect.isawaitable(res)):
            dt = t1 - t0
            CURRENT_PLUGIN.reset(token)
            d = p.durations
            d[0] += 1
            d[1] += dt
            self.plugin_seconds += dt
            return res
        return Pending(self, p, res, t0, token)  # awaiting it is the plugin's time too

    async def call_prepared(self, p: Prepared, *values: Any) -> Any:
        """:meth:`call` of a prepared implementation of any kind (async, threaded or plain), with the call
        site's arguments by position: :meth:`call_sync`, its :class:`Pending` awaited. (A hot call site
        writes these three lines itself, saving a coroutine per call.)"""
        res = self.call_sync(p, *values)
        if type(res) is Pending:
            res = await res
        return res

    def _done(self, d: list[float], t0: float, token: contextvars.Token[str | None]) -> None:
        dt = time.perf_counter() - t0
        CURRENT_PLUGIN.reset(token)
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
