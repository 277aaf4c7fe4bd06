"""colocation_replay: ``koordfw replay colocation``, a week of real service usage (Bitbrains) plus a real
batch queue (the Alibaba 2018 hour) replayed through the real kernel and plugins, with and without
colocation. See ``docs/replay.md``."""

from .model import (
    Replay,
    Result,
    batch_fraction,
    default_nodes,
    koordinator_profile,
    reclaim_percent,
    recommended_profile,
)
from .traces import LSTrace, Task, TraceError, load_batch, load_ls

__all__ = ["LSTrace", "Replay", "Result", "Task", "TraceError", "batch_fraction", "default_nodes",
           "koordinator_profile", "load_batch", "load_ls", "reclaim_percent", "recommended_profile"]
