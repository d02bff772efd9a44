"""Targets and their lifecycle: the planned images, their builds, events, bases and
the rules that move a target from state to state. Above ``shared``.
"""
