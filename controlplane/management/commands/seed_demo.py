import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from orchestration.gateway_snapshot import publish_snapshot
from registry import seed as registry_seed
from rollouts import seed as rollouts_seed
from tenants import seed as tenants_seed


class Command(BaseCommand):
    help = (
        "Create (or restore) the demo data: tenants, people with each role and a CI token. "
        "Safe to run again. --json prints logins, keys, tokens, routes and URLs as one object."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic():
            tenants = tenants_seed.seed()
            registry = registry_seed.seed()
            rollouts = rollouts_seed.seed()
        publish_snapshot()  # at once, rather than when a worker gets to it
        web = settings.PUBLIC_WEB_URL
        result = {
            "urls": {
                "web": web,
                "admin": f"{web}/admin/",
                "api_docs": f"{web}/api/docs/",
                "readyz": f"{web}/readyz",
                "gateway": settings.PUBLIC_GATEWAY_URL,
                "prometheus": settings.PROMETHEUS_URL,
            },
            "logins": tenants["logins"],
            "ci_token": tenants["ci_token"],
            "tenants": tenants["tenants"],
            "tenant_api_keys": tenants["tenant_api_keys"],
            "routes": rollouts["routes"],
            "models": registry,
        }
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2))
            return
        self.stdout.write(self.style.SUCCESS("Demo data is in place."))
        for name, url in result["urls"].items():
            self.stdout.write(f"  {name:<11} {url}")
        self.stdout.write("Logins (password for all: " + tenants_seed.DEMO_PASSWORD + "):")
        for login in result["logins"]:
            tenant = f" of {login['tenant']}" if login["tenant"] else ""
            self.stdout.write(f"  {login['username']:<13} {login['role']}{tenant}")
        self.stdout.write(f"CI token ({tenants['ci_token']['username']}): ")
        self.stdout.write(f"  {tenants['ci_token']['token']}")
        self.stdout.write(f"Routes: {', '.join(result['routes'])} (model names for the gateway)")
        self.stdout.write("Gateway keys (Authorization: Bearer …):")
        for slug, secret in result["tenant_api_keys"].items():
            self.stdout.write(f"  {slug:<8} {secret}")
        key = result["tenant_api_keys"]["acme"]
        self.stdout.write("Try it:")
        self.stdout.write(
            f"  curl {settings.PUBLIC_GATEWAY_URL}/v1/chat/completions "
            f"-H 'Authorization: Bearer {key}' -H 'content-type: application/json' "
            f"""-d '{{"model": "{result["routes"][0]}", "messages": """
            """[{"role": "user", "content": "hi"}]}'"""
        )
