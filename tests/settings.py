"""Settings for the test suite: the real ones, with test defaults for the environment.

Tests use Redis database 15 so that they never touch the data (or the Celery queue) of a stack
started with `make up` on the same machine. Two runs can share a machine when each sets its own
REDIS_URL (another database number) and TEST_DATABASE_NAME.
"""

import os

os.environ.setdefault("SECRET_KEY", "test-secret-key-that-is-long-enough-for-django-0123456789")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)

from controlplane.settings import *  # noqa: F403

# Hashing passwords at full strength makes each login in the tests take ~0.3 s.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Static files are served from the finders; no collectstatic output exists in a test run.
WHITENOISE_AUTOREFRESH = True
# Live-server threads must not keep connections open past their request, or the test database
# cannot be dropped at the end of the run.
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
# Side-by-side runs on one machine each name their own test database.
if os.environ.get("TEST_DATABASE_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": os.environ["TEST_DATABASE_NAME"]}  # noqa: F405
