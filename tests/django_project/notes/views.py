from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse

from tests.django_project.notes.models import Note
from tests.django_project.notes.tasks import process_note, process_note_now


class Rollback(Exception):
    pass


def create_note(request: HttpRequest) -> HttpResponse:
    """POST text (and rollback=1 to make the transaction fail after the enqueue)."""
    try:
        with transaction.atomic():
            note = Note.objects.create(text=request.POST["text"])
            process_note.delay_on_commit(note.pk)
            if request.POST.get("rollback"):
                raise Rollback
    except Rollback:
        return JsonResponse({"rolled_back": True}, status=409)
    return JsonResponse({"id": note.pk}, status=201)


def create_note_without_transaction(request: HttpRequest) -> HttpResponse:
    """Autocommit: the note is committed by create(), so the job is sent at once."""
    note = Note.objects.create(text=request.POST["text"])
    job_id = f"note-{note.pk}"
    process_note_now.apply_async_on_commit((note.pk,), priority="high", job_id=job_id)
    return JsonResponse({"id": note.pk, "job_id": job_id}, status=201)
