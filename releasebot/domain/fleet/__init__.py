"""The fleet: nodes, the operator's rules, coverage, proof on a GPU, the reboot gate
and retention. Above ``targets``.
"""
