"""Engines: where the kernel runs (embedded cluster, Kubernetes, extender, node agent)."""
