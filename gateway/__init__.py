"""Tollgate's OpenAI-compatible data plane (an ASGI service that imports no Django)."""
