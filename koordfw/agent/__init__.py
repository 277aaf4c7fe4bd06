"""The node agent engine (``koordfw agent``): collect → plan → apply on a Linux node's cgroups.

``executor`` applies :class:`koordfw.core.nodestate.FileWrite` lists; ``cgroups`` discovers pods in the
kubelet's cgroup layout and reads usage; ``loop`` runs the plugins' node QoS hooks every interval.
"""
