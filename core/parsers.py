"""The API's request parsers: DRF's, bounded so that no body a client sends can become a 500.

DRF's JSON parser lets a RecursionError out of `json.load` for a body nested a few thousand
levels deep, and authentication classes that read the body (the Flagger webhook's token travels
in it) run before any view code could catch it. These parsers refuse JSON nested deeper than any
Tollgate document, and a NUL character anywhere in the data, since Postgres stores none in text
or jsonb columns. The body's size is bounded before they see it: DRF reads it through Django's
`request.body`, which refuses more than DATA_UPLOAD_MAX_MEMORY_SIZE (a 413, core/api.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

from django.conf import settings
from django.http import QueryDict
from django.utils.datastructures import MultiValueDict
from rest_framework import parsers
from rest_framework.exceptions import ParseError

if TYPE_CHECKING:
    from django.http.request import _ImmutableQueryDict

# Plans, gates, model cards and lm-evaluation-harness results nest a handful of levels.
MAX_JSON_DEPTH = 64

# "\u0000" escaped in JSON text: preceded by an odd number of backslashes (an even number is a
# literal backslash followed by the letters "u0000").
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")

NUL_MESSAGE = "the body holds a NUL character (\\u0000), which Tollgate cannot store; remove it"


def _encoding(parser_context: Mapping[str, Any] | None) -> str:
    encoding = str((parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET)
    try:
        # A charset Python does not know, or a codec that is no text encoding (bz2_codec), would
        # be a LookupError out of the decoding: as DRF's own parsers do, refuse it first.
        "".encode(encoding)
    except (LookupError, UnicodeError) as exc:
        raise ParseError(f"unsupported charset {encoding!r} in the Content-Type header") from exc
    return encoding


def _check_depth(value: dict[str, Any] | list[Any], depth: int = 1) -> None:
    # Recursive, but never past MAX_JSON_DEPTH frames; it skips scalars, so a 10 MB results file
    # costs about as much again as parsing it.
    if depth > MAX_JSON_DEPTH:
        raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels")
    for child in value.values() if isinstance(value, dict) else value:
        if isinstance(child, dict | list):
            _check_depth(child, depth + 1)


class JSONParser(parsers.JSONParser):
    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        encoding = _encoding(parser_context)
        body = stream.read()
        try:
            text = body.decode(encoding)
            # The substring test first: it is a hundred times quicker than the search.
            if "\\u0000" in text and _ESCAPED_NUL.search(text):
                raise ParseError(NUL_MESSAGE)
            parse_constant = _refuse_constant if self.strict else None
            data = json.loads(text, parse_constant=parse_constant)
        except RecursionError as exc:
            raise ParseError(
                f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels"
            ) from exc
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError among them
            raise ParseError(f"JSON parse error - {exc}") from exc
        if isinstance(data, dict | list):
            _check_depth(data)
        return data


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _refuse_nul(data: QueryDict) -> None:
    for key, values in data.lists():
        if "\x00" in key or any("\x00" in value for value in values):
            raise ParseError(NUL_MESSAGE)


class FormParser(parsers.FormParser):
    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> _ImmutableQueryDict:
        data = super().parse(stream, media_type, parser_context)
        _refuse_nul(data)
        return data


class MultiPartParser(parsers.MultiPartParser):
    """Django's multipart parser already bounds the size of the fields (files are streamed)."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> parsers.DataAndFiles[_ImmutableQueryDict, MultiValueDict[str, Any]]:
        parsed = super().parse(stream, media_type, parser_context)
        _refuse_nul(parsed.data)
        return parsed
