"""The test project's one app: notes, each processed by a task once its transaction commits."""
