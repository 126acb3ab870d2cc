"""`tollgate artifact register` and `tollgate eval upload` against a real control plane."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from registry.models import EvalScore, LineageEdge, ModelArtifact
from tests.cli.conftest import Drop, Forward, Invoke, StandIn, run_cli
from tests.registry.factories import digest_of, register

RESULTS = Path(__file__).parent.parent / "registry" / "data" / "results_2026-11-30T12-00-00.json"


def register_args(version: str, *extra: str) -> list[str]:
    return [
        *("artifact", "register", f"support-chat:{version}"),
        *("--uri", f"s3://models/support-chat/{version}"),
        *("--digest", f"sha256:{digest_of(version)}"),
        *extra,
    ]


def test_registers_an_artifact_with_its_parent_and_metadata(tollgate: Invoke) -> None:
    assert tollgate(*register_args("base")).exit_code == 0
    result = tollgate(
        *register_args("ft", "--parent", "support-chat:base", "--relation", "fine_tune"),
        *("--metadata", "dataset=support-2026-11", "--metadata", "lr=2e-5"),
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "support-chat:ft\n"
    assert "registered support-chat:ft" in result.stderr
    assert "finetune of support-chat:base" in result.stderr
    artifact = ModelArtifact.objects.get(family="support-chat", version="ft")
    assert artifact.metadata == {"dataset": "support-2026-11", "lr": "2e-5"}
    assert artifact.digest.removeprefix("sha256:") == digest_of("ft")
    edge = LineageEdge.objects.get(child=artifact)
    assert (str(edge.parent), edge.relation) == ("support-chat:base", "finetune")


def test_registering_again_is_safe_and_another_digest_is_refused(tollgate: Invoke) -> None:
    first = tollgate("--json", *register_args("v1"))
    again = tollgate("--json", *register_args("v1"))
    assert (first.exit_code, again.exit_code) == (0, 0), again.output
    assert json.loads(again.stdout)["digest"] == json.loads(first.stdout)["digest"]
    assert ModelArtifact.objects.count() == 1

    conflict = tollgate(*register_args("v1")[:-1], f"sha256:{digest_of('other')}")
    assert conflict.exit_code == 2
    assert "409" in conflict.stderr
    assert "already registered" in conflict.stderr


def test_a_register_whose_answer_was_lost_is_retried_and_registers_once(
    server: str, ci_token: str, stand_in_factory: Callable[..., StandIn], fast_retries: None
) -> None:
    # The real server registers the artifact, then the answer is lost on its way back; the
    # retry carries the same Idempotency-Key and gets the first answer replayed.
    proxy = stand_in_factory(upstream=server, script=[Drop(forward=True), Forward()])
    result = run_cli(["--json", *register_args("v1")], url=proxy.url, token=ci_token)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["version"] == "v1"
    assert "retrying" in result.stderr
    assert "with the same Idempotency-Key" in result.stderr
    assert [s.method for s in proxy.seen] == ["POST", "POST"]
    keys = {s.headers["Idempotency-Key"] for s in proxy.seen}
    assert len(keys) == 1
    assert proxy.seen[0].body == proxy.seen[1].body
    assert ModelArtifact.objects.count() == 1


def test_a_parent_without_a_relation_is_a_usage_error(tollgate: Invoke) -> None:
    result = tollgate(*register_args("ft", "--parent", "support-chat:base"))
    assert result.exit_code == 2
    assert "--parent needs --relation" in result.stderr
    assert not ModelArtifact.objects.exists()


def test_uploads_lm_eval_results_as_they_are(tollgate: Invoke) -> None:
    register(version="v1")
    result = tollgate("eval", "upload", str(RESULTS), "--artifact", "support-chat:v1")
    assert result.exit_code == 0, result.output
    assert "uploaded 6 scores for support-chat:v1" in result.stderr
    assert EvalScore.objects.count() == 6
    # NaN made it through as written (a JSON round trip in the client would have refused it).
    bleu = EvalScore.objects.get(metric="bleu_max")
    assert bleu.value is None

    as_json = tollgate("--json", "eval", "upload", str(RESULTS), "--artifact", "support-chat:v1")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["scores"] == 6


def test_uploading_for_an_unknown_artifact_names_it(tollgate: Invoke) -> None:
    result = tollgate("eval", "upload", str(RESULTS), "--artifact", "support-chat:v9")
    assert result.exit_code == 2
    assert "no artifact support-chat:v9 is registered" in result.stderr
    assert "404" in result.stderr
