"""What the adapters share at the edge to the outside world, written once.

Below the adapters and above the domain (an import-linter contract says so): every adapter
may use it, it uses nothing but the domain.

- ``text``: third-party text (exception messages, reason phrases, server bodies) made one
  printable line of bounded length before it reaches an error, a log line or the store;
- ``redact``: credentials masked (by form, and by known value) wherever text leaves the
  process;
- ``retry``: the one bounded-retry policy for retrying ONE call inside an adapter, and the
  ``Retry-After`` header;
- ``kube``: the Kubernetes client (lightkube) made and its errors translated, for the two
  adapters that talk to the API server (the build Job launcher and the leader election);
- ``json``: the one bounded JSON reader for every answer from outside;
- ``parse``: one ASCII-only, bounded parser per kind of outside value (numbers,
  ``Content-Length``, listen addresses, URLs, paths, secret files, regular files);
- ``redirects``: the one redirect policy, judged before a redirect is followed;
- ``slackweb``: slack-sdk's ``WebClient`` reading answers through ``json``.

``text``, ``redact``, ``retry``, ``json``, ``parse`` and ``redirects`` import only the
standard library (and the domain); ``kube`` imports lightkube and ``slackweb`` slack-sdk,
each imported only by the adapters that use them, so nothing here slows an import elsewhere.
Deliberately not here: retries across cycles (the service decides from the error's class)
and anything that knows one adapter's protocol.
"""
