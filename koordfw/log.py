"""structlog set-up: console output when interactive, JSON lines with ``--log-format json``."""

from __future__ import annotations

import logging
import sys

import structlog


def add_plugin_name(logger, method, event_dict):
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
