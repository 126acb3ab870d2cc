from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from tenants.choices import Role, Scope
from tenants.models import ApiToken, User
from tenants.services.accounts import api_token_create, api_token_revoke, user_create

USERNAME = "prometheus"
TOKEN_NAME = "prometheus-sd"  # noqa: S105 -- a name, not a secret


class Command(BaseCommand):
    help = (
        "Give Prometheus a fresh read-only token for its HTTP service discovery "
        "(/api/v1/prometheus/targets) and write it to PATH (mode 0600); the previous one is "
        "revoked. `make up` runs it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)

    def handle(self, *args: Any, path: Path, **options: Any) -> None:
        with transaction.atomic():
            user = User.objects.filter(username=USERNAME).first() or user_create(
                actor=None, username=USERNAME, role=Role.VIEWER
            )
            if user.role != Role.VIEWER:
                raise CommandError(
                    f"the user {USERNAME!r} is a {user.get_role_display().lower()}, not the "
                    "viewer this command keeps for Prometheus: rename that user"
                )
            now = timezone.now()
            previous = ApiToken.objects.filter(
                user=user, revoked_at=None, name__startswith=TOKEN_NAME
            )
            for token in previous:
                api_token_revoke(actor=None, token_id=token.pk)
            _, secret = api_token_create(
                actor=None,
                user=user,
                name=f"{TOKEN_NAME}-{now:%Y%m%d-%H%M%S-%f}",
                scopes=[Scope.ROLLOUTS_READ],
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(secret)
        self.stdout.write(f"Prometheus' service-discovery token is in {path}")
