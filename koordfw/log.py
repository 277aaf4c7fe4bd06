"""structlog set-up: console output when interactive, JSON lines with ``--log-format json``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Hashable
from typing import Any

import structlog
from structlog.typing import EventDict, WrappedLogger

from .core.memo import BoundedCache


def add_plugin_name(logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
    """Name the plugin on every record logged while one of its hooks runs."""
    from .core.caller import CURRENT_PLUGIN

    plugin = CURRENT_PLUGIN.get()
    if plugin is not None:
        event_dict.setdefault("plugin", plugin)
    return event_dict


class _StderrLogger:
    """Writes to whatever ``sys.stderr`` is at the time of the call (tests swap it)."""

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log = debug = info = warn = warning = error = critical = exception = fatal = failure = msg


def _stderr_logger_factory(*_args: object) -> _StderrLogger:
    return _StderrLogger()


def configure(fmt: str = "auto", level: str = "warning") -> None:
    lvl = getattr(logging, level.upper(), logging.WARNING)
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, add_plugin_name, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso"), structlog.processors.format_exc_info,
                    renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=_stderr_logger_factory,
        cache_logger_on_first_use=False,
    )


#: keys a warn-once set holds before it forgets them all (bounds memory on a cluster that keeps changing)
WARN_ONCE_LIMIT = 65536


def warn_once(logger: Any, seen: set | BoundedCache[Any, bool] | None, key: Hashable, event: str, **kw: Any) -> None:
    """``logger.warning(event, **kw)`` unless ``key`` is in ``seen`` already: how a plugin reports a node's
    or pod's unreadable annotation once, not at every round that reads it again. ``seen`` is the caller's:
    a plugin instance's set (it holds at most :data:`WARN_ONCE_LIMIT` keys, then starts again) or a
    :class:`koordfw.BoundedCache` (its own bound, the oldest key forgotten first); ``None`` warns every
    time."""
    if seen is not None:
        if key in seen:
            return
        if isinstance(seen, BoundedCache):
            seen[key] = True
        else:
            if len(seen) >= WARN_ONCE_LIMIT:
                seen.clear()
            seen.add(key)
    logger.warning(event, **kw)
