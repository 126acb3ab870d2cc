"""Reading lm-evaluation-harness results and plain score lists."""

import json
import math
from pathlib import Path
from typing import Any

import pytest

from registry.evals import EvalFormatError, parse_lm_eval, parse_score_list

RESULTS = Path(__file__).parent / "data" / "results_2026-11-30T12-00-00.json"


def results() -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(RESULTS.read_text())
    return payload


def test_it_reads_a_results_file_as_the_harness_writes_it() -> None:
    run = parse_lm_eval(results())
    scores = {(s.task, s.metric, s.filter): s for s in run.scores}
    arc = scores[("arc_easy", "acc", "none")]
    assert (arc.value, arc.stderr, arc.higher_is_better, arc.n_shot) == (0.7512, 0.0089, True, 0)
    assert scores[("gsm8k", "exact_match", "strict-match")].n_shot == 5
    assert ("gsm8k", "exact_match", "flexible-extract") in scores
    assert run.git_hash == "a1b2c3d"
    assert run.harness_version == "0.4.9"
    assert run.evaluated_at is not None
    assert run.dataset_versions["gsm8k"] == 3.0
    assert len(run.scores) == 6  # stderr entries and aliases are not scores


def test_nan_values_and_na_errors_are_kept_honestly() -> None:
    scores = {(s.task, s.metric): s for s in parse_lm_eval(results()).scores}
    bleu = scores[("truthfulqa_gen", "bleu_max")]
    assert bleu.value is None
    assert bleu.stderr is None
    assert bleu.raw == {"value": "nan", "stderr": "N/A"}
    rouge = scores[("truthfulqa_gen", "rouge1_acc")]
    assert rouge.value == pytest.approx(0.3317)
    assert rouge.stderr is None


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda p: p.pop("results"), "results: missing"),
        (lambda p: p.update(results=[1, 2]), "results: expected an object"),
        (lambda p: p["results"].update(arc_easy=7), "results.arc_easy: expected an object"),
        (
            lambda p: p["results"]["gsm8k"].update({"exact_match,strict-match": True}),
            "results.gsm8k.exact_match,strict-match: expected a number",
        ),
        (lambda p: p.update(results={}), "results: empty"),
        (lambda p: p.update({"n-shot": "five"}), "n-shot: expected an object"),
    ],
)
def test_malformed_results_name_the_field(mutate: Any, message: str) -> None:
    payload = results()
    mutate(payload)
    with pytest.raises(EvalFormatError, match=message.replace("[", r"\[").replace(".", r"\.")):
        parse_lm_eval(payload)


def test_a_plain_score_list_is_read() -> None:
    run = parse_score_list(
        [
            {"task": "support_qa", "metric": "win_rate", "value": 0.61, "stderr": 0.02},
            {"task": "latency", "metric": "p95_ms", "value": 410, "higher_is_better": False},
            {"task": "toxicity", "metric": "rate", "value": float("nan")},
        ],
        suite="internal",
    )
    assert run.suite == "internal"
    assert [s.value for s in run.scores][:2] == [0.61, 410.0]
    assert run.scores[1].higher_is_better is False
    assert run.scores[2].value is None
    assert math.isnan(float(run.scores[2].raw["value"]))


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([], "scores: the list is empty"),
        ([{"metric": "m", "value": 1}], r"\[0\]\.task: expected a non-empty string"),
        ([{"task": "t", "metric": "m"}], r"\[0\]\.value: missing"),
        ([{"task": "t", "metric": "m", "value": "high"}], r"\[0\]\.value: expected a number"),
        ([{"task": "t", "metric": "m", "value": 1, "n_shot": "5"}], r"\[0\]\.n_shot"),
        ([5], r"\[0\]: expected an object"),
    ],
)
def test_a_malformed_score_list_names_the_field(payload: list[Any], message: str) -> None:
    with pytest.raises(EvalFormatError, match=message):
        parse_score_list(payload)
