from django.db import models


class Note(models.Model):
    text = models.CharField(max_length=200)
    status = models.CharField(max_length=20, default="new")
    worker_pid = models.IntegerField(null=True)
    fresh_connection = models.BooleanField(null=True)
    """Whether the task found no database connection open when it started."""
