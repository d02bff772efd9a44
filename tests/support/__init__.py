"""What the tests stand on, shared by every test package: fake servers over real HTTP
(Kubernetes API, Slack Web API and Socket Mode, feeds), the real OCI registry and
PostgreSQL set-ups, the OCI 1.1 referrers API in front of that registry, skopeo as an
independent signature verifier, a real ``releasebot`` subprocess, the build loop's clock
and Kaniko stand-in, and targets made in one line.

Nothing in here is a test; the registry and Kubernetes fixtures are pytest plugins
(``pytest_plugins`` in ``tests/conftest.py``).
"""
