"""Integrations with other tools, each an optional extra (``taskq[django]``, ...); taskq
itself imports nothing from here."""
