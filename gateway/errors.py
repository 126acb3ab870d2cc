"""Errors the gateway answers, in the OpenAI envelope: {"error": {message, type, param, code}}."""

from __future__ import annotations

import orjson


class GatewayError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.code = code
        self.param = param
        self.retry_after_s = retry_after_s

    def body(self) -> bytes:
        error = {
            "message": str(self),
            "type": self.error_type,
            "param": self.param,
            "code": self.code,
        }
        return orjson.dumps({"error": error})

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", b"application/json")]
        if self.retry_after_s is not None:
            headers.append((b"retry-after", str(self.retry_after_s).encode()))
        return headers


def bad_request(message: str, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(400, message, param=param, code=code)
