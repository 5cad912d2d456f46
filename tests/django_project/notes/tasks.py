"""Found by the project's app through INSTALLED_APPS (views import it too)."""

import os

from django.db import connection

from taskq.contrib.django import app, task
from tests.django_project.notes.models import Note


def process(note_id: int) -> str:
    fresh = connection.connection is None  # the worker closed the last job's connection
    note = Note.objects.get(pk=note_id)  # committed before the job was sent: it is there
    note.status, note.worker_pid, note.fresh_connection = "done", os.getpid(), fresh
    note.save()
    return f"processed {note.text}"


@task
def process_note(note_id: int) -> str:
    """A shared task (``@taskq.contrib.django.task``)."""
    return process(note_id)


@app.task
def process_note_now(note_id: int) -> str:
    """A task of the project's app itself (a tasks.py may use ``app`` while it is found)."""
    return process(note_id)
