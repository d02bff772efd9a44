"""The chat front door: ``/releasebot`` parsing (pure) and the Slack transports.

``commands`` turns chat text into a validated ``Command`` and imports nothing from Slack;
``slack`` (HTTP slash commands) and ``socket`` (Socket Mode) share one handler and call the
use cases only through the small ``CommandRunner`` protocol the wiring hands them.
"""
