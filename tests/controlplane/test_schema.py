import io

from django.core.management import call_command


def test_the_openapi_schema_generates_without_warnings(db: None) -> None:
    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    assert "/api/v1/registry/artifacts" in out.getvalue()
    assert "bearer" in out.getvalue()
