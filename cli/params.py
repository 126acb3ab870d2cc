"""Command-line value types: each parses one kind of argument and says what is wrong with it
(as a usage error, exit code 2) before any request is sent."""

from __future__ import annotations

import re
from typing import Any

import click

_FAMILY = re.compile(r"^[-a-zA-Z0-9_]+$")  # the API's SlugField
_VERSION = re.compile(r"^[A-Za-z0-9._+-]{1,100}$")  # the API's version RegexField


class ArtifactRefType(click.ParamType[tuple[str, str]]):
    """FAMILY:VERSION, e.g. support-chat:v3 -> ("support-chat", "v3")."""

    name = "FAMILY:VERSION"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value  # already converted (a default)
        family, colon, version = str(value).partition(":")
        if not colon or not _FAMILY.match(family) or not _VERSION.match(version):
            self.fail(
                f"{value!r} is not FAMILY:VERSION (e.g. support-chat:v3; the family a slug, the "
                "version letters, digits and . _ + -)",
                param,
                ctx,
            )
        return family, version


class KeyValueType(click.ParamType[tuple[str, str]]):
    """KEY=VALUE -> (key, value); the value is kept as text."""

    name = "KEY=VALUE"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        key, equals, text = str(value).partition("=")
        if not equals or not key.strip():
            self.fail(f"{value!r} is not KEY=VALUE", param, ctx)
        return key.strip(), text


class StepType(click.ParamType[dict[str, float | int]]):
    """WEIGHT[:MIN_BAKE_S[:MIN_SAMPLES]], e.g. 10:600:500 -> the API's step object."""

    name = "WEIGHT[:BAKE_S[:SAMPLES]]"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> dict[str, float | int]:
        if isinstance(value, dict):
            return value
        parts = str(value).split(":")
        try:
            if not 1 <= len(parts) <= 3:
                raise ValueError
            step: dict[str, float | int] = {"weight": float(parts[0])}
            if len(parts) > 1:
                step["min_bake_s"] = int(parts[1])
            if len(parts) > 2:
                step["min_samples"] = int(parts[2])
        except ValueError:
            self.fail(
                f"{value!r} is not WEIGHT[:MIN_BAKE_S[:MIN_SAMPLES]] (e.g. 10, or 10:600:500 for "
                "10% baked at least 600 s over at least 500 samples)",
                param,
                ctx,
            )
        return step


ARTIFACT = ArtifactRefType()
KEY_VALUE = KeyValueType()
STEP = StepType()


def artifact_name(ref: tuple[str, str]) -> str:
    return f"{ref[0]}:{ref[1]}"
