"""Runnable examples of taskq; see examples/README.md."""
