"""Reading eval results as they come: lm-evaluation-harness `results_<timestamp>.json` files as
the harness writes them, or a plain JSON list of scores.

Both parse into the same `ParsedRun`. Every problem is reported as an `EvalFormatError` naming
the field (`results.arc_easy.acc,none: expected a number`), so a CI upload that fails says what to
fix. NaN values and "N/A" standard errors are real outputs of the harness: they are kept as
such (value None, the original in `raw`), never dropped and never a crash.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any

STDERR_SUFFIX = "_stderr"
# Keys of a task's results that are not metrics.
NON_METRIC_KEYS = {"alias", "name", "sample_len", "samples"}


class EvalFormatError(ValueError):
    """The upload is not a results file or score list we can read; the message names the field."""


@dataclass(frozen=True)
class ParsedScore:
    task: str
    metric: str
    filter: str
    value: float | None
    stderr: float | None
    higher_is_better: bool | None
    n_shot: int | None
    raw: dict[str, Any]


@dataclass(frozen=True)
class ParsedRun:
    suite: str
    harness_version: str = ""
    evaluated_at: dt.datetime | None = None
    git_hash: str = ""
    dataset_versions: dict[str, Any] = field(default_factory=dict)
    n_shot: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    scores: list[ParsedScore] = field(default_factory=list)


def _number(value: Any, where: str) -> float | None:
    """A float, or None for the harness's NaN, "N/A" and null; anything else is an error."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise EvalFormatError(f"{where}: expected a number, got {value!r}")
    if isinstance(value, int | float):
        return None if math.isnan(value) or math.isinf(value) else float(value)
    if isinstance(value, str) and value.strip().upper() in {"N/A", "NAN", ""}:
        return None
    raise EvalFormatError(f"{where}: expected a number, got {value!r}")


def _split_key(key: str) -> tuple[str, str]:
    metric, _, filter_name = key.partition(",")
    return metric, filter_name or "none"


def _dict(payload: dict[str, Any], name: str) -> dict[str, Any]:
    value = payload.get(name, {})
    if not isinstance(value, dict):
        raise EvalFormatError(f"{name}: expected an object, got {type(value).__name__}")
    return value


def parse_lm_eval(payload: dict[str, Any]) -> ParsedRun:
    if "results" not in payload:
        raise EvalFormatError("results: missing; is this an lm-evaluation-harness results file?")
    results = _dict(payload, "results")
    if not results:
        raise EvalFormatError("results: empty, no task to record")
    higher = _dict(payload, "higher_is_better")
    n_shot = _dict(payload, "n-shot")
    scores: list[ParsedScore] = []
    for task, metrics in results.items():
        if not isinstance(metrics, dict):
            raise EvalFormatError(f"results.{task}: expected an object of metrics")
        shots = n_shot.get(task)
        shots = shots if isinstance(shots, int) and not isinstance(shots, bool) else None
        for key, raw_value in metrics.items():
            metric, filter_name = _split_key(key)
            if key in NON_METRIC_KEYS or metric.endswith(STDERR_SUFFIX):
                continue
            value = _number(raw_value, f"results.{task}.{key}")
            stderr_key = f"{metric}{STDERR_SUFFIX},{filter_name}"
            raw_stderr = metrics.get(stderr_key)
            stderr = (
                _number(raw_stderr, f"results.{task}.{stderr_key}")
                if raw_stderr is not None
                else None
            )
            direction = (
                (higher.get(task) or {}).get(metric) if isinstance(higher.get(task), dict) else None
            )
            scores.append(
                ParsedScore(
                    task=task,
                    metric=metric,
                    filter=filter_name,
                    value=value,
                    stderr=stderr,
                    higher_is_better=direction if isinstance(direction, bool) else None,
                    n_shot=shots,
                    raw={"value": _jsonable(raw_value), "stderr": _jsonable(raw_stderr)},
                )
            )
    if not scores:
        raise EvalFormatError("results: no numeric metric in any task")
    date = payload.get("date")
    evaluated_at = (
        dt.datetime.fromtimestamp(float(date), tz=dt.UTC)
        if isinstance(date, int | float) and not isinstance(date, bool) and math.isfinite(date)
        else None
    )
    config = _dict(payload, "config")
    return ParsedRun(
        suite="lm-evaluation-harness",
        harness_version=str(payload.get("lm_eval_version") or ""),
        evaluated_at=evaluated_at,
        git_hash=str(payload.get("git_hash") or "")[:64],
        dataset_versions=_dict(payload, "versions"),
        n_shot=n_shot,
        config={"config": config, "configs": _dict(payload, "configs")},
        scores=scores,
    )


def parse_score_list(payload: list[Any], suite: str = "") -> ParsedRun:
    if not payload:
        raise EvalFormatError("scores: the list is empty")
    scores = []
    for index, item in enumerate(payload):
        where = f"[{index}]"
        if not isinstance(item, dict):
            raise EvalFormatError(f"{where}: expected an object with task, metric and value")
        for name in ("task", "metric"):
            if not isinstance(item.get(name), str) or not item[name]:
                raise EvalFormatError(f"{where}.{name}: expected a non-empty string")
        if "value" not in item:
            raise EvalFormatError(f"{where}.value: missing")
        direction = item.get("higher_is_better")
        if direction is not None and not isinstance(direction, bool):
            raise EvalFormatError(f"{where}.higher_is_better: expected true or false")
        shots = item.get("n_shot")
        if shots is not None and (isinstance(shots, bool) or not isinstance(shots, int)):
            raise EvalFormatError(f"{where}.n_shot: expected an integer")
        scores.append(
            ParsedScore(
                task=item["task"],
                metric=item["metric"],
                filter=str(item.get("filter") or "none"),
                value=_number(item["value"], f"{where}.value"),
                stderr=_number(item["stderr"], f"{where}.stderr")
                if item.get("stderr") is not None
                else None,
                higher_is_better=direction,
                n_shot=shots,
                raw={"value": _jsonable(item["value"]), "stderr": _jsonable(item.get("stderr"))},
            )
        )
    return ParsedRun(suite=suite or "scores", scores=scores)


def _jsonable(value: Any) -> Any:
    """NaN and infinities are not JSON: keep them as the strings the harness means."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
