"""What the CLI says when it cannot do its job: on stderr, with what to fix, and exit code 2."""

from __future__ import annotations

from rollouts.models import Rollout
from tests.cli.conftest import Invoke, run_cli
from tests.conftest import free_port


def test_a_bad_token_says_what_is_wrong_and_where_to_get_one(
    tollgate: Invoke, running: Rollout
) -> None:
    bad = "tg_not-a-real-token-0123456789"
    result = tollgate("rollout", "status", str(running.pk), token=bad)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "401" in result.stderr
    assert "Invalid or revoked API token." in result.stderr
    assert "set TOLLGATE_TOKEN" in result.stderr
    assert "create_api_token" in result.stderr
    assert "/account/tokens/" in result.stderr
    assert bad not in result.output


def test_a_missing_scope_is_named(tollgate: Invoke) -> None:
    # The CI pipeline's token has the registry and rollout scopes, not tokens:write.
    result = tollgate("token", "create", "--name", "more", "--scope", "rollouts:read")
    assert result.exit_code == 2
    assert "403" in result.stderr
    assert "lacks the scope(s): tokens:write" in result.stderr
    assert "use a token that holds that scope" in result.stderr


def test_no_url_is_a_usage_error_before_any_request() -> None:
    result = run_cli(["rollout", "status", "1"], url=None, token="tg_something")
    assert result.exit_code == 2
    assert "TOLLGATE_URL is not set" in result.stderr
    assert "export TOLLGATE_URL=" in result.stderr


def test_no_token_is_a_usage_error_before_any_request() -> None:
    result = run_cli(["rollout", "status", "1"], url="http://127.0.0.1:1", token=None)
    assert result.exit_code == 2
    assert "TOLLGATE_TOKEN is not set" in result.stderr
    assert "create_api_token" in result.stderr


def test_a_malformed_token_is_refused_without_being_shown() -> None:
    secret = "tg_half-of-it and-the-rest"
    result = run_cli(["rollout", "status", "1"], url="http://127.0.0.1:1", token=secret)
    assert result.exit_code == 2
    assert "TOLLGATE_TOKEN is not a well-formed token" in result.stderr
    assert "half-of-it" not in result.output


def test_an_unreachable_server_is_retried_then_named(fast_retries: None) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = run_cli(["--retries", "1", "rollout", "status", "1"], url=url, token="tg_secret-value")
    assert result.exit_code == 2
    assert f"cannot reach the control plane at {url}: connection refused (2 attempts)" in (
        result.stderr
    )
    assert "check TOLLGATE_URL" in result.stderr
    assert "retrying" in result.stderr
    assert "tg_secret-value" not in result.output


def test_a_bad_argument_is_a_usage_error() -> None:
    result = run_cli(
        ["deploy", "--artifact", "no-version", "--fleet", "f", "--served-model-name", "m"],
        url=None,
        token=None,
    )
    assert result.exit_code == 2
    assert "is not FAMILY:VERSION" in result.stderr
