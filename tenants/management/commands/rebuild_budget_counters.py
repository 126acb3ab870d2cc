from typing import Any

import redis
from django.core.management.base import BaseCommand, CommandError

from tenants.budget_counters import budget_counters_rebuild


class Command(BaseCommand):
    help = (
        "Raise every tenant's day and month budget counters in Redis to the tokens its usage "
        "rows show (never lowers one). The beat does this by itself when Redis restarts."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            tenants = budget_counters_rebuild()
        except (redis.RedisError, OSError) as exc:
            raise CommandError(f"cannot reach Redis (REDIS_URL): {exc}") from exc
        self.stdout.write(f"budget counters checked for {tenants} tenants with usage this month")
