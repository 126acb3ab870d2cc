from typing import Any

import psycopg
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from controlplane.database import ensure_database


class Command(BaseCommand):
    help = "Create the database named by DATABASE_URL if it does not exist yet."

    def handle(self, *args: Any, **options: Any) -> None:
        url = settings.DATABASE
        try:
            created = ensure_database(url)
        except psycopg.Error as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise CommandError(
                f"cannot reach Postgres at {url.redacted()} (DATABASE_URL): {reason}"
            ) from exc
        verb = "created" if created else "already exists"
        self.stdout.write(f"database {url.name!r} {verb}")
