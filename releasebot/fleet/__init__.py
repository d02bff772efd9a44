"""The fleet adapters: Nodes and the GPU Operator's objects, read from a cluster or memory.

``kubernetes.py`` (``KubernetesFleetSource``) is the real ``FleetSource``; ``memory.py``
(``MemoryFleetSource``) holds objects given to it, for dry runs, the demo and tests. Both
parse through ``domain/fleet/nodes.py`` and ``domain/fleet/operator.py`` and pass one
contract suite.
"""
