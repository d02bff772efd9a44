"""Where releasebot runs: the kubeconfig, this replica's name and the Lease's namespace.

Three values come from the process's environment as well as from the settings:
``$KUBECONFIG`` (kubectl's), and ``$POD_NAME`` and ``$POD_NAMESPACE`` (the Downward API's, set
by ``config/base/deployment.yaml`` and the CronJob). One rule for all three, applied here
and nowhere else: **the setting wins over the environment**, and the environment over the
fallback.

- kubeconfig: ``kubernetes.kubeconfig``, else ``$KUBECONFIG``, else none (the in-cluster
  service account);
- replica name: ``run.identity``, else ``$POD_NAME``, else the host name (a Pod's host name
  is its name too);
- the Lease's namespace has no setting of its own: it is the Pod's own namespace, which
  ``config/base/role.yaml`` grants the Lease in, so ``$POD_NAMESPACE``, else (outside a
  Pod) ``kubernetes.namespace``. ``kubernetes.namespace`` is the build namespace, another
  thing, so it is only the fallback.

Read once per call from the mapping given (``os.environ`` by default), so a test passes its
own; nothing is read at import.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping

from releasebot.config.sections import Settings


def kubeconfig_path(settings: Settings, environ: Mapping[str, str] | None = None) -> str | None:
    """The kubeconfig file to read; ``None``: the in-cluster service account."""
    environ = os.environ if environ is None else environ
    return settings.kubernetes.kubeconfig or environ.get("KUBECONFIG") or None


def replica_identity(
    settings: Settings,
    environ: Mapping[str, str] | None = None,
    hostname: Callable[[], str] = socket.gethostname,
) -> str:
    """This replica's name (in the Lease and as the cycle guard's holder)."""
    environ = os.environ if environ is None else environ
    return settings.run.identity or environ.get("POD_NAME") or hostname()


def lease_namespace(settings: Settings, environ: Mapping[str, str] | None = None) -> str:
    """The namespace of the leader election's Lease: the Pod's own."""
    environ = os.environ if environ is None else environ
    return environ.get("POD_NAMESPACE") or settings.kubernetes.namespace
