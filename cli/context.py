"""What the group's options give every command: where the control plane is, the token, and how
to print. The API client is made on first use, so `--help` works without a URL or token."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import click

from cli.errors import CliError
from cli.http import Api

TOKENS_HINT = (
    "make a token on <TOLLGATE_URL>/account/tokens/ or with `manage.py create_api_token USER "
    "--scope ...`, then export TOLLGATE_TOKEN=<the token> (a CI secret)"
)


@dataclass
class Settings:
    url: str | None
    token: str | None
    json_output: bool
    retries: int
    _api: Api | None = field(default=None, repr=False)

    def api(self) -> Api:
        """The client, checked and made on first use; closed when the command ends."""
        if self._api is None:
            self._api = Api(self._checked_url(), self._checked_token(), retries=self.retries)
            click.get_current_context().call_on_close(self._api.close)
        return self._api

    def _checked_url(self) -> str:
        url = (self.url or "").strip()
        if not url:
            raise CliError(
                "TOLLGATE_URL is not set: the CLI does not know where the control plane is",
                hint="export TOLLGATE_URL=http://127.0.0.1:8000 (the control plane's base URL) "
                "or pass --url",
            )
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise CliError(
                f"TOLLGATE_URL must be an http:// or https:// URL, not {url!r}",
                hint="e.g. export TOLLGATE_URL=https://tollgate.example.com",
            )
        # People paste the API's root; the CLI adds /api/v1 itself.
        return url.rstrip("/").removesuffix("/api/v1")

    def _checked_token(self) -> str:
        token = (self.token or "").strip()
        if not token:
            raise CliError("TOLLGATE_TOKEN is not set: the API needs a token", hint=TOKENS_HINT)
        # Checked here, not left to the HTTP library: its error for a bad header value would
        # quote the value, which is the token.
        if not token.isascii() or not token.isprintable() or " " in token:
            raise CliError(
                "TOLLGATE_TOKEN is not a well-formed token (it holds spaces or control characters)",
                hint="set it to the token alone, as it was shown when it was made",
            )
        return token

    def print_json(self, value: Any) -> None:
        click.echo(json.dumps(value, indent=2, sort_keys=False))


pass_settings = click.make_pass_decorator(Settings)


def note(text: str) -> None:
    """A line for the person (stderr): stdout keeps what scripts capture (an id, a secret)."""
    click.echo(text, err=True)
