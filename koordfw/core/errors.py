"""User-facing errors: they carry where the problem is, and the CLI prints them without a traceback."""

from __future__ import annotations


class KoordfwError(Exception):
    """Base class of errors that the CLI reports as a message and a non-zero exit."""


class ManifestError(KoordfwError):
    """A malformed manifest, object or quantity. Names the file, the object and the field."""

    def __init__(self, message: str, *, file: str | None = None, obj: str | None = None,
                 field: str | None = None) -> None:
        self.file, self.obj, self.field, self.detail = file, obj, field, message
        where = []
        if file:
            where.append(str(file))
        if obj:
            where.append(obj)
        if field:
            where.append(f"field {field}")
        super().__init__(f"{': '.join(where)}: {message}" if where else message)


class ConfigError(KoordfwError):
    """A bad profile or plugin configuration."""


class PluginLoadError(KoordfwError):
    """A plugin could not be imported or registered."""
