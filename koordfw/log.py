"""structlog set-up: console output when interactive, JSON lines with ``--log-format json``."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(fmt: str = "auto", level: str = "warning") -> None:
    lvl = getattr(logging, level.upper(), logging.WARNING)
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso"), structlog.processors.format_exc_info,
                    renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
