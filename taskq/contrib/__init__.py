"""Integrations with other libraries, each an optional extra (``taskq[django]``, ...)."""
