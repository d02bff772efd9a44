"""The running process: the scheduler and its cycles (``runner``), the metrics it
exports, the database guard that keeps two cycles from writing at once (``lock``) and
leader election (``leader``). Above the use cases, which import no SDK.
"""
