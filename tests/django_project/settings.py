"""Settings of the test project: the SQLite file is named by ``DJANGO_TEST_DB``, so that the
test, the processes that play the web side and the worker all use the same database."""

import os

SECRET_KEY = "taskq-tests-only"
DEBUG = True  # the worker resets the query log per job, as Django does per request
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
INSTALLED_APPS = ["taskq.contrib.django", "tests.django_project.notes"]
ROOT_URLCONF = "tests.django_project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["DJANGO_TEST_DB"]}
}
# The Redis URL comes from TASKQ_REDIS_URL; the queue from here, whatever TASKQ_QUEUE says.
TASKQ = {"queue": "notes", "store_results": True}
