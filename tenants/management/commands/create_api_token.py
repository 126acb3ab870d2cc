import datetime as dt
import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from core.errors import DomainError
from tenants.choices import ROLE_SCOPES, Scope
from tenants.models import User
from tenants.services.accounts import api_token_create

DURATION = re.compile(r"^(\d+)([dh])$")


class Command(BaseCommand):
    help = (
        "Issue an API token to USER and print the token alone on standard output (it is never "
        "shown again), e.g. TOLLGATE_TOKEN=$(manage.py create_api_token ci --scope "
        "registry:write --scope rollouts:write --expires 90d)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--scope",
            action="append",
            required=True,
            help="a scope the token holds (repeat it, or separate scopes with commas); "
            f"one of: {', '.join(Scope.values)}, or 'all' for every scope the user's role allows",
        )
        parser.add_argument(
            "--expires", help="when it stops working: 90d, 12h, or an ISO date/time (UTC)"
        )
        parser.add_argument("--name", help="how lists show it (default: cli-<timestamp>)")

    def handle(self, *args: Any, **options: Any) -> None:
        user = User.objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user named {options['username']!r}")
        scopes = _scopes(options["scope"], user)
        expires_at = _expiry(options["expires"])
        name = options["name"] or f"cli-{timezone.now():%Y%m%d-%H%M%S}"
        try:
            token, secret = api_token_create(
                actor=None, user=user, name=name, scopes=scopes, expires_at=expires_at
            )
        except DomainError as exc:
            raise CommandError(str(exc)) from exc
        expiry = f", expires {expires_at.isoformat()}" if expires_at else ", does not expire"
        self.stderr.write(
            f"token {token.name!r} ({token.prefix}…) for {user.get_username()}: "
            f"{', '.join(token.scopes)}{expiry}"
        )
        self.stdout.write(secret)


def _scopes(given: list[str], user: User) -> list[Scope]:
    names = {part.strip() for value in given for part in value.split(",") if part.strip()}
    if "all" in names:
        names = (names - {"all"}) | set(ROLE_SCOPES.get(user.role, ()))
    unknown = sorted(names - set(Scope.values))
    if unknown:
        raise CommandError(
            f"unknown scope(s) {', '.join(unknown)}; choose from {', '.join(Scope.values)}"
        )
    return [Scope(name) for name in sorted(names)]


def _expiry(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    duration = DURATION.match(value.strip())
    if duration:
        amount, unit = int(duration[1]), duration[2]
        return timezone.now() + (
            dt.timedelta(days=amount) if unit == "d" else dt.timedelta(hours=amount)
        )
    try:
        moment = dt.datetime.fromisoformat(value.strip())
    except ValueError as exc:
        raise CommandError(
            f"--expires {value!r}: give a duration (90d, 12h) or an ISO date/time "
            "(2027-01-31 or 2027-01-31T12:00)"
        ) from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
