"""The settings tree: one TOML file plus ``RELEASEBOT_<SECTION>_<KEY>`` environment overrides.

Loaded once at start-up by the CLI and handed, piece by piece, to ``wiring``; adapters and
use cases never see it (an import-linter contract says so). Every problem is a
``ConfigError`` naming the key (or the environment variable that set it), so a bad setting
costs one line, not a traceback.

- ``sections``: the tree. Each field says everything about its setting where it is
  declared: its default, its rule and, where the key a user writes is not the field's
  name, that key. Durations are ``timedelta`` fields read from the documented
  ``*_seconds`` keys (``run.interval`` is ``interval_seconds`` in the file). A default is
  written once: there, or where the options that own it hold it (``KanikoOptions``,
  ``LifecycleRules``, the retry policy), and taken from them.
- ``rules``: the rules, one function each; the Kaniko options' are the builder's own
  (``builders.kaniko``), and the options are built once at load, so their rules between
  fields (a request above its limit) are reported against their keys too.
- ``load``: the file, the environment, conversions, the rules between fields.
- ``example``: the example file (``releasebot config example``), written from the
  sections' and fields' docstrings and their defaults.

Environment values are strings: lists are comma-separated (``RELEASEBOT_FLATCAR_CHANNELS=
stable,lts``), numbers are decimal. The environment wins over the file.

Defaults, their units and why they are what they are: each field's docstring in
``sections``, written out as ``config/releasebot.example.toml``.
"""

from releasebot.config.load import CONFIG_ENV, ENV_PREFIX, load_settings
from releasebot.config.rules import redact_url
from releasebot.config.sections import (
    BuildSettings,
    DatabaseSettings,
    FlatcarSettings,
    FleetSettings,
    HttpSettings,
    KanikoSettings,
    KubernetesSettings,
    NvidiaSettings,
    RecipeSettings,
    RegistrySettings,
    RunSettings,
    Settings,
    SigningSettings,
    SlackSettings,
)

__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "BuildSettings",
    "DatabaseSettings",
    "FlatcarSettings",
    "FleetSettings",
    "HttpSettings",
    "KanikoSettings",
    "KubernetesSettings",
    "NvidiaSettings",
    "RecipeSettings",
    "RegistrySettings",
    "RunSettings",
    "Settings",
    "SigningSettings",
    "SlackSettings",
    "load_settings",
    "redact_url",
]
