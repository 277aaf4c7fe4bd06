"""The kernel's core: model, queue, cycle, hook caller. Imports no engine."""
