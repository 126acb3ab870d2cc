import asyncio
import random
from typing import Any

import aiohttp
import uvloop
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from tenants.seed import demo_tenant_key

QUESTIONS = [
    "Where is my order?",
    "How do I reset my password?",
    "Can I change the delivery address?",
    "What is your refund policy?",
]


class Command(BaseCommand):
    help = "Sends demo traffic through the gateway (as tenant acme) until stopped."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rate", type=float, default=20.0, help="requests per second")

    def handle(self, *args: Any, **options: Any) -> None:
        uvloop.run(self._run(options["rate"]))

    async def _run(self, rate: float) -> None:
        url = f"{settings.PUBLIC_GATEWAY_URL}/v1/chat/completions"
        headers = {"Authorization": f"Bearer {demo_tenant_key('acme')}"}
        rng = random.Random()  # noqa: S311 -- demo traffic, not secrets
        async with aiohttp.ClientSession() as session:

            async def one() -> None:
                body = {
                    "model": "support-chat",
                    "user": f"customer-{rng.randrange(5000)}",
                    "messages": [{"role": "user", "content": rng.choice(QUESTIONS)}],
                    # Room for the whole answer, as clients leave it (truncating nine answers
                    # in ten, as a tight limit would, is not what a support chat does).
                    "max_tokens": 512,
                    "stream": rng.random() < 0.5,
                }
                try:
                    async with session.post(url, json=body, headers=headers) as response:
                        await response.read()
                except aiohttp.ClientError:
                    pass  # the gateway restarting: the next request will tell

            tasks: set[asyncio.Task[None]] = set()
            while True:
                task = asyncio.create_task(one())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                await asyncio.sleep(rng.expovariate(rate))
