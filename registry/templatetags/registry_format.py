"""Number formats of the registry pages: scores with four decimals, deltas with their sign."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def score(value: float | None) -> str:
    # The harness writes NaN (and "N/A" errors) for real; the row keeps it, so the page says it.
    return "NaN" if value is None else f"{value:.4f}"


@register.filter
def signed(value: float | None) -> str:
    return "" if value is None else f"{value:+.4f}"
