"""``manage.py taskq_worker``."""
