"""A small Django project for tests/integration/test_django.py (SQLite, one app)."""
