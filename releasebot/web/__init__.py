"""The one small HTTP server of ``releasebot run`` (``server.HttpServer``).

It serves the kubelet's probes, Prometheus and Slack's slash commands, and nothing else:
it knows neither the scheduler nor Slack, only the callables it is given.
"""
