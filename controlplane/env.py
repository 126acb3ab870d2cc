"""Typed reading of Tollgate's environment variables.

Settings come from the environment only. Every reader names the variable and the form it expects,
so a mistake surfaces as one actionable line (see `ConfigError`) instead of a traceback deep inside
Django or a driver. Readers collect errors in an `EnvReader` so that all mistakes are reported at
once rather than one per restart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import SplitResult, unquote, urlsplit


class ConfigError(Exception):
    """The environment does not describe a usable configuration; the message says what to fix."""


@dataclass(frozen=True)
class PostgresUrl:
    user: str
    password: str
    host: str
    port: int
    name: str

    def redacted(self) -> str:
        """The URL with the password hidden: safe for logs and error messages."""
        auth = self.user + (":***" if self.password else "")
        return f"postgres://{auth}@{self.host}:{self.port}/{self.name}"


def redact_url(url: str) -> str:
    """Hide the password of any URL so that error messages never carry a secret."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.netloc.rpartition("@")[2]
        return parts._replace(netloc=f"{parts.username or ''}:***@{host}").geturl()
    except ValueError:
        return "<unparseable URL>"


@dataclass
class EnvReader:
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    errors: list[str] = field(default_factory=list)

    def _raw(self, name: str, default: str | None) -> str | None:
        value = self.environ.get(name)
        if value is None or value.strip() == "":
            return default
        return value.strip()

    def _fail(self, name: str, expected: str, got: str | None) -> None:
        shown = "not set" if got is None else f"got {got!r}"
        self.errors.append(f"{name}: expected {expected}; {shown}")

    def string(self, name: str, default: str | None = None, *, min_length: int = 1) -> str:
        value = self._raw(name, default)
        if value is None or len(value) < min_length:
            expected = f"a string of at least {min_length} characters"
            # A secret is never echoed back, not even a short wrong one.
            self._fail(name, expected, None if value is None else f"<{len(value)} characters>")
            return ""
        return value

    def secret(self, name: str, *, min_length: int, development_file: Path | None) -> str:
        """A secret from the environment, or from `development_file` when the variable is unset.

        The caller passes a file only for a development configuration; production sets the variable.
        """
        if self._raw(name, None) is None and development_file and development_file.is_file():
            return self.string(name, development_file.read_text().strip(), min_length=min_length)
        return self.string(name, min_length=min_length)

    def boolean(self, name: str, default: bool) -> bool:
        value = self._raw(name, None)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off"}:
            return False
        self._fail(name, "true or false (also 1/0, yes/no, on/off)", value)
        return default

    def port(self, name: str, default: int) -> int:
        value = self._raw(name, None) or str(default)
        if value.isdigit() and 1 <= int(value) <= 65535:
            return int(value)
        self._fail(name, "a TCP port number between 1 and 65535", value)
        return default

    def positive_int(self, name: str, default: int) -> int:
        value = self._raw(name, None) or str(default)
        if value.isdigit() and int(value) >= 1:
            return int(value)
        self._fail(name, "a whole number of at least 1", value)
        return default

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self._raw(name, None) or default
        if value.upper() in choices:
            return value.upper()
        self._fail(name, "one of " + ", ".join(choices), value)
        return default

    def csv(self, name: str, default: str) -> list[str]:
        value = self._raw(name, default) or ""
        return [item.strip() for item in value.split(",") if item.strip()]

    def _url(self, name: str, default: str, schemes: tuple[str, ...], form: str) -> SplitResult:
        value = self._raw(name, None) or default
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 -- property access validates the port
        except ValueError:
            self._fail(name, form, redact_url(value))
            return urlsplit(default)
        if parts.scheme not in schemes or not parts.hostname:
            self._fail(name, form, redact_url(value))
            return urlsplit(default)
        return parts

    def postgres_url(self, name: str, default: str) -> PostgresUrl:
        form = "postgres://USER[:PASSWORD]@HOST[:PORT]/DBNAME"
        parts = self._url(name, default, ("postgres", "postgresql"), form)
        db_name = unquote(parts.path.lstrip("/"))
        if not db_name or "/" in db_name:
            self._fail(name, f"{form} (the database name is missing)", redact_url(parts.geturl()))
            parts = urlsplit(default)
            db_name = parts.path.lstrip("/")
        return PostgresUrl(
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            host=parts.hostname or "localhost",
            port=parts.port or 5432,
            name=db_name,
        )

    def redis_url(self, name: str, default: str) -> str:
        form = "redis://[:PASSWORD@]HOST[:PORT][/DB] (or rediss:// for TLS)"
        parts = self._url(name, default, ("redis", "rediss"), form)
        db = parts.path.lstrip("/")
        if db and not db.isdigit():
            self._fail(name, f"{form} with a numeric DB", redact_url(parts.geturl()))
            return default
        return parts.geturl()

    def http_url(self, name: str, default: str) -> str:
        parts = self._url(name, default, ("http", "https"), "http(s)://HOST[:PORT][/PATH]")
        return parts.geturl().rstrip("/")

    def raise_if_invalid(self) -> None:
        if self.errors:
            raise ConfigError("invalid configuration: " + " | ".join(self.errors))
