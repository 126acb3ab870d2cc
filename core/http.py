from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """The request type of views behind django-htmx's middleware (for the type checker)."""

    htmx: HtmxDetails
