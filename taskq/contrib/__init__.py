"""Integrations of taskq with other tools; taskq itself imports nothing from here."""
