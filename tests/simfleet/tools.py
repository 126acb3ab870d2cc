"""Tools offered in the tests, and a check of the arguments a model called them with.

The schemas are flat on purpose, so that the check below is complete for them without a JSON
Schema library.
"""

from __future__ import annotations

import json
from typing import Any

from openai.types.chat import ChatCompletionFunctionToolParam

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "units": {"type": "string", "enum": ["metric", "imperial"]},
        "hourly": {"type": "boolean"},
    },
    "required": ["city", "days"],
}
TIME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"timezone": {"type": "string"}},
    "required": ["timezone"],
}
TOOLS: list[ChatCompletionFunctionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The forecast for a city",
            "parameters": WEATHER_SCHEMA,
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "description": "The time", "parameters": TIME_SCHEMA},
    },
]
SCHEMAS = {"get_weather": WEATHER_SCHEMA, "get_time": TIME_SCHEMA}


JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def matches_schema(arguments: str, schema: dict[str, Any]) -> bool:
    """Whether tool-call arguments are a JSON object a tool with this (flat) schema accepts."""
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return False
    if not isinstance(value, dict):
        return False
    properties: dict[str, Any] = schema["properties"]
    if any(name not in value for name in schema["required"]):
        return False
    for name, item in value.items():
        if name not in properties:
            return False
        rule = properties[name]
        if isinstance(item, bool) and rule["type"] != "boolean":
            return False
        if not isinstance(item, JSON_TYPES[rule["type"]]):
            return False
        if "enum" in rule and item not in rule["enum"]:
            return False
        if "minimum" in rule and not rule["minimum"] <= item <= rule["maximum"]:
            return False
    return True
