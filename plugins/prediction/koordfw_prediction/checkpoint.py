"""koordlet's prediction checkpoints (``pkg/koordlet/prediction/checkpoint.go``): one JSON file per model in
the checkpoint directory, named by the model's UID::

    {"UID": "<uid>", "CPU": <histogram checkpoint>, "Memory": <histogram checkpoint>, "LastUpdated": "<RFC 3339>"}

A save writes ``<uid>.tmp`` then renames it over ``<uid>`` (atomic: a crash leaves the old file or the new
one, never half of one). Restore removes leftover ``.tmp`` files and returns every other file; one that
cannot be read or decoded comes back with its error, and the caller logs and removes it. A file is at most
:data:`MAX_FILE_BYTES` (a histogram checkpoint is bounded: at most a few hundred buckets of uint32), so a
larger one is corrupt.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import attrs

TMP_SUFFIX = ".tmp"
#: a checkpoint file larger than this is not one of ours (a full one is ~6 KiB)
MAX_FILE_BYTES = 256 * 1024


def valid_uid(uid: str) -> bool:
    """A UID usable as a file name (pod UIDs and the node items are)."""
    return bool(uid) and "/" not in uid and "\\" not in uid and not uid.startswith(".") and "\0" not in uid \
        and not uid.endswith(TMP_SUFFIX) and len(uid) <= 253


@attrs.frozen
class ModelCheckpoint:
    uid: str
    cpu: Mapping[str, Any] | None = None
    memory: Mapping[str, Any] | None = None
    last_updated: str = ""
    #: why the file could not be decoded ("" when it could)
    error: str = ""


class FileCheckpointer:
    """``fileCheckpointer``: ``path`` is the directory (created on the first save)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def save(self, ck: ModelCheckpoint) -> None:
        if not valid_uid(ck.uid):
            raise ValueError(f"invalid model UID for a checkpoint file: {ck.uid[:60]!r}")
        os.makedirs(self.path, exist_ok=True)
        name = os.path.join(self.path, ck.uid)
        tmp = name + TMP_SUFFIX
        body = json.dumps({"UID": ck.uid, "CPU": ck.cpu, "Memory": ck.memory, "LastUpdated": ck.last_updated},
                          sort_keys=True, separators=(",", ":"))
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, name)

    def remove(self, uid: str) -> None:
        if valid_uid(uid):
            try:
                os.remove(os.path.join(self.path, uid))
            except FileNotFoundError:
                pass

    def restore(self) -> list[ModelCheckpoint]:
        """Every checkpoint file, sorted by name; leftover ``.tmp`` files are removed."""
        try:
            names = sorted(os.listdir(self.path))
        except FileNotFoundError:
            return []
        out = []
        for n in names:
            full = os.path.join(self.path, n)
            if not os.path.isfile(full):
                continue
            if n.endswith(TMP_SUFFIX):
                try:
                    os.remove(full)
                except OSError:
                    pass
                continue
            out.append(_read(full, n))
        return out


def _read(path: str, uid: str) -> ModelCheckpoint:
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            return ModelCheckpoint(uid, error=f"larger than {MAX_FILE_BYTES} bytes")
        with open(path, encoding="utf-8") as f:
            obj = json.loads(f.read())
    except (OSError, ValueError) as e:
        return ModelCheckpoint(uid, error=f"{type(e).__name__}: {e}"[:200])
    if not isinstance(obj, dict):
        return ModelCheckpoint(uid, error="expected a JSON object")
    cpu, mem, last = obj.get("CPU"), obj.get("Memory"), obj.get("LastUpdated")
    if not isinstance(cpu, dict) or not isinstance(mem, dict) or not isinstance(last, str):
        return ModelCheckpoint(uid, error="CPU, Memory (objects) and LastUpdated (a time) are required")
    # the UID is the file's name, as koordlet resets it
    return ModelCheckpoint(uid, cpu=cpu, memory=mem, last_updated=last)
