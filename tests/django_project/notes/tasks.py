"""Found by the project's app through INSTALLED_APPS (nothing imports it by name but views)."""

import os

from django.db import connection

from taskq.contrib.django import task
from tests.django_project.notes.models import Note


@task
def process_note(note_id: int) -> str:
    fresh = connection.connection is None  # the worker closed the last job's connection
    note = Note.objects.get(pk=note_id)  # committed before the job was sent: it is there
    note.status, note.worker_pid, note.fresh_connection = "done", os.getpid(), fresh
    note.save()
    return f"processed {note.text}"
