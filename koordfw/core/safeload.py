"""Reading untrusted text: YAML and JSON with every size bounded.

Everything koordfw reads from a user or a cluster (manifests, profiles, node state files, extender
bodies, JSON annotations) goes through here, so that no input, however small, can cost unbounded time
or memory, recurse past the interpreter's stack, or smuggle non-finite numbers past the validators:

* nesting deeper than :data:`MAX_DEPTH` is refused (Kubernetes objects nest about 15 deep);
* a YAML document whose aliases expand to more than :data:`MAX_ALIAS_EXPANSION` extra nodes is refused
  (the "billion laughs" bomb), as is a file larger than :data:`MAX_FILE_BYTES`;
* JSON's ``NaN``/``Infinity`` extensions are refused (RFC 8259 has no such numbers; Go's decoder rejects
  them too); a JSON ``1e400`` and YAML's ``.nan``/``.inf`` parse as non-finite floats, which every reader
  of a number refuses with the field's name (quantities, timestamps, durations); integers of more than
  4300 digits are refused by both loaders;
* text must be UTF-8 (a BOM is allowed), as Kubernetes requires.

Errors are :class:`InputError` (a ``ValueError``) with a message that says what is wrong and where in
the text; the caller adds which file or object it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

#: deepest nesting of mappings and lists accepted in any document
MAX_DEPTH = 100
#: how many nodes YAML aliases may add to a document beyond the ones written out
MAX_ALIAS_EXPANSION = 100_000
#: largest file read as a manifest, profile or state file
MAX_FILE_BYTES = 256 * 2**20


class InputError(ValueError):
    """Text that cannot be read safely; the message says why and where in the text."""


def shorten(value: object, limit: int = 40) -> str:
    """``repr`` of a bad value for an error message, cut to ``limit`` characters (a 10,000-digit number
    or a megabyte string must not become a megabyte error line)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for repr (sys.get_int_max_str_digits)
        return f"<a {type(value).__name__} too long to print>"
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def decode_text(data: bytes | str) -> str:
    """UTF-8 text (a leading BOM dropped); anything else is an :class:`InputError` naming the byte."""
    if isinstance(data, str):
        return data[1:] if data.startswith("\ufeff") else data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text: invalid byte 0x{data[e.start]:02x} at offset {e.start}") from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path: str | Path, *, limit: int = MAX_FILE_BYTES) -> str:
    """A file's text, at most ``limit`` bytes, decoded as UTF-8. ``OSError`` passes through."""
    p = Path(path)
    with p.open("rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"file is larger than {limit} bytes")
    return decode_text(data)


def check_depth(obj: Any, limit: int = MAX_DEPTH) -> None:
    """Raise :class:`InputError` when ``obj`` nests mappings and lists deeper than ``limit``."""
    stack = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            children: Any = o.values()
        elif isinstance(o, (list, tuple)):
            children = o
        else:
            continue
        if d > limit:
            raise InputError(f"nested more than {limit} levels deep")
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list, tuple)))


def _no_constant(name: str) -> Any:
    raise InputError(f"{name} is not a JSON number")


def loads_json(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` with NaN/Infinity refused, nesting bounded and UTF-8 enforced for bytes."""
    s = decode_text(text)
    try:
        obj = json.loads(s, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise InputError(f"invalid JSON: nested more than {max_depth} levels deep") from None
    except InputError:
        raise
    except ValueError as e:  # an integer of more than sys.get_int_max_str_digits() digits
        raise InputError(f"invalid JSON: {e}".split(";")[0]) from None
    check_depth(obj, max_depth)
    return obj


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the composer's recursion and the aliases' expansion bounded."""

    max_depth = MAX_DEPTH
    max_alias_expansion = MAX_ALIAS_EXPANSION

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._written = 0
        self._sizes: dict[int, int] = {}

    def compose_document(self) -> Any:
        self._written = 0
        self._sizes = {}
        node = super().compose_document()
        expanded = self._sizes.get(id(node), 1)
        if expanded - self._written > self.max_alias_expansion:
            raise yaml.YAMLError(f"aliases expand to more than {self.max_alias_expansion} extra nodes")
        return node

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            if self._sizes.get(id(node), 1) > self.max_alias_expansion:
                raise yaml.YAMLError(f"aliases expand to more than {self.max_alias_expansion} extra nodes")
            return node
        self._depth += 1
        if self._depth > self.max_depth:
            mark = self.peek_event().start_mark
            raise yaml.MarkedYAMLError(problem=f"nested more than {self.max_depth} levels deep", problem_mark=mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._written += 1
        # the node's size with every alias below it expanded; anchors are composed before their aliases
        size = 1
        if isinstance(node, yaml.SequenceNode):
            size += sum(self._sizes.get(id(c), 1) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            size += sum(self._sizes.get(id(k), 1) + self._sizes.get(id(v), 1) for k, v in node.value)
        if size > 1:
            self._sizes[id(node)] = size
            if size - self._written > self.max_alias_expansion:
                raise yaml.YAMLError(f"aliases expand to more than {self.max_alias_expansion} extra nodes")
        return node


def _yaml_error(e: yaml.YAMLError) -> InputError:
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(e, "problem", None) or str(e)
    return InputError(f"invalid YAML{where}: {problem}")


def load_yaml_all(text: str | bytes) -> list[Any]:
    """Every non-empty document of a YAML stream (JSON is YAML too), bounded as this module says."""
    s = decode_text(text)
    loader = _BoundedLoader(s)
    try:
        docs = []
        while loader.check_data():
            d = loader.get_data()
            if d is not None:
                docs.append(d)
        return docs
    except yaml.YAMLError as e:
        raise _yaml_error(e) from None
    except RecursionError:
        raise InputError(f"invalid YAML: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as e:  # the constructor's int(): more than sys.get_int_max_str_digits() digits
        raise InputError(f"invalid YAML: {e}".split(";")[0]) from None
    finally:
        loader.dispose()


def load_yaml(text: str | bytes) -> Any:
    """One YAML document (``None`` for an empty one); more than one is an error."""
    docs = load_yaml_all(text)
    if len(docs) > 1:
        raise InputError(f"expected one YAML document, found {len(docs)}")
    return docs[0] if docs else None
