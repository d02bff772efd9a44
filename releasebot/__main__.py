"""``python -m releasebot`` is the same as the ``releasebot`` command."""

from releasebot.cli import main

raise SystemExit(main())
