"""Django management commands of taskq."""
