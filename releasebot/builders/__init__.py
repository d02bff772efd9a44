"""Builders: Kaniko Job rendering (pure) and the launchers that run those Jobs.

``kaniko`` renders one ``BuildRequest`` into a batch/v1 Job manifest and knows nothing of a
cluster; ``kubernetes`` creates and follows those Jobs through the API server; ``memory``
keeps them in a dict for ``--dry-run`` and the tests. Both launchers satisfy
``releasebot.domain.ports.JobLauncher`` and pass the same contract suite.
"""
