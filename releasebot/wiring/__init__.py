"""The only package that names concrete adapters: it turns ``Settings`` into working objects.

Its modules, top to bottom (an import-linter contract keeps them in this order, so the
wiring has no cycle):

- ``run``: ``releasebot run``, the scheduler, the leader election and the web server, on
  one database engine;
- ``slack``: outbox delivery, the HTTP slash command and Socket Mode, built as ``RunHooks``
  (the rounds are ``service.delivery``'s, the guarded commands ``chat.guarded``'s);
- ``hooks``: ``RunHooks``, what features plug into ``run``; ``guard``: the database's
  cycle guard as one process shares it, and the replica's name; ``retention``: the
  retention use case with its store, fleet source and registry deletes;
- ``core``: the stores, feeds, registry, the Kubernetes client and launcher, and the
  reconcile service;
- ``signing``: the signing key, the attestor and ``releasebot verify``'s check, from the
  ``[signing]`` settings (the cryptography and SBOM libraries load only when called).

The wiring builds and nothing else: behaviour lives in the package owning its concern
(the demo's simulated builds in ``demo``, the delivery rounds and run's log lines in
``service``, the guarded chat commands in ``chat``), and ``KUBECONFIG``, ``POD_NAME`` and
``POD_NAMESPACE`` are read by ``config.pod`` alone.

The CLI imports from here (and ``releasebot run`` from ``wiring.run``, which only that
command loads); nothing here connects at import time.
"""

from releasebot.wiring.core import (
    db_current,
    db_downgrade,
    db_upgrade,
    demo_fleet_source,
    demo_registry,
    demo_settings,
    open_store,
    plan_service,
    recipe_manifest,
    reconcile_service,
    utc_now,
    verify_tag,
    with_fleet,
)
from releasebot.wiring.guard import guarded, run_identity

__all__ = [
    "db_current",
    "db_downgrade",
    "db_upgrade",
    "demo_fleet_source",
    "demo_registry",
    "demo_settings",
    "guarded",
    "open_store",
    "plan_service",
    "recipe_manifest",
    "reconcile_service",
    "run_identity",
    "utc_now",
    "verify_tag",
    "with_fleet",
]
