"""Did the model call a tool, and can the tool accept the arguments it wrote?"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError


@lru_cache(maxsize=1024)
def _validator(schema_json: bytes) -> Draft202012Validator | None:
    try:
        schema = orjson.loads(schema_json)
        Draft202012Validator.check_schema(schema)
    except (orjson.JSONDecodeError, SchemaError):
        return None  # an unusable schema: the call is judged on JSON validity alone
    return Draft202012Validator(schema)


def tool_outcome(tools: list[dict[str, Any]], calls: list[dict[str, str]]) -> str:
    """no_call, valid, invalid_json (arguments do not parse) or invalid_schema."""
    if not calls:
        return "no_call"
    schemas = {
        str(t["function"]["name"]): t["function"].get("parameters") or {"type": "object"}
        for t in tools
    }
    for call in calls:
        try:
            arguments = orjson.loads(call["arguments"] or "")
        except orjson.JSONDecodeError:
            return "invalid_json"
        schema = schemas.get(call["name"])
        if schema is None:
            return "invalid_schema"  # a tool that was not offered
        validator = _validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
        if validator is not None and not validator.is_valid(arguments):
            return "invalid_schema"
    return "valid"
