"""Reading a scorer's reply and turning it into a child's rubric score.

The score is the gated weighted sum `1[success] · Σ_i w_i s_i` over the rubric's criteria,
computed here from the per-criterion scores (design "Where we intend to differ" item 2). The
scorer's own `final_score` is kept as a diagnostic. `mode="model_final"` reproduces the released
code instead (sera-spec §4.4, §11.1 item 4): the score is the scorer's `final_score`, checked
only for consistency with its `success` flag.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ConfigDict

from sera.judge.parse import ReplyParseError, extract_json_object
from sera.rubric.schema import FieldError, Rubric
from sera.types import Record

ScoreMode = Literal["gated", "model_final"]
"""`gated`: recompute the gated weighted sum (the paper); `model_final`: trust the scorer's
`final_score` (the released code)."""

_MODES = ("gated", "model_final")


class ScoreError(FieldError):
    """A score reply or score input that cannot be used; the message names the field (e.g.
    `criterion_scores[1].score`) and value."""


class Assessment(Record):
    """A scorer's reply, parsed and checked against the rubric it applied."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)

    success: bool
    """The scorer's verdict on the success gate."""
    criterion_scores: dict[str, float]
    """Score in [0, 1] per criterion, keyed by the rubric's own criterion names, in rubric order
    (empty in `model_final` mode when the reply's per-criterion scores were not usable)."""
    model_final: float | None
    """The scorer's own `final_score` (a diagnostic in `gated` mode); None if it gave none."""
    reason: str
    """The scorer's overall justification ('' if it gave none)."""


def _key(name: str) -> str:
    return name.strip().casefold()


def _is_number(value: Any) -> bool:
    # bool is an int subclass in Python, but `true` is not a number in JSON.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _unit_score(value: Any, field: str) -> float:
    if not _is_number(value) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ScoreError(f"must be a number in [0, 1], got {value!r}", field)
    return float(value)


def _canonical_scores(rubric: Rubric, named: list[tuple[str, Any, str, str]], where: str) -> dict[str, float]:
    """Scores keyed by the rubric's names; `named` holds (name, score, name field, score field)."""
    by_key = {_key(c.name): c.name for c in rubric.criteria}
    out: dict[str, float] = {}
    first_seen: dict[str, str] = {}
    for name, value, field, score_field in named:
        canonical = by_key.get(_key(name))
        if canonical is None:
            raise ScoreError(f"unknown criterion {name!r}; the rubric's criteria are {list(by_key.values())}", field)
        if canonical in out:
            raise ScoreError(f"criterion {canonical!r} scored twice (also at {first_seen[canonical]})", field)
        first_seen[canonical] = field
        out[canonical] = _unit_score(value, score_field)
    missing = [c.name for c in rubric.criteria if c.name not in out]
    if missing:
        raise ScoreError(f"no score for criterion(s) {missing}", where)
    return {c.name: out[c.name] for c in rubric.criteria}


def _reply_criterion_scores(obj: Mapping[str, Any], rubric: Rubric) -> dict[str, float]:
    if "criterion_scores" not in obj:
        raise ScoreError("missing", "criterion_scores")
    entries = obj["criterion_scores"]
    if not isinstance(entries, list):
        raise ScoreError(f"must be a list of objects, got {entries!r}", "criterion_scores")
    named: list[tuple[str, Any, str, str]] = []
    for i, entry in enumerate(entries):
        field = f"criterion_scores[{i}]"
        if not isinstance(entry, Mapping):
            raise ScoreError(f"must be an object, got {entry!r}", field)
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ScoreError(f"must be a non-empty string, got {name!r}", f"{field}.name")
        if "score" not in entry:
            raise ScoreError("missing", f"{field}.score")
        named.append((name, entry["score"], f"{field}.name", f"{field}.score"))
    return _canonical_scores(rubric, named, "criterion_scores")


def _model_final(obj: Mapping[str, Any], *, required: bool) -> float | None:
    """The scorer's `final_score` (the released code falls back to a `score` key when required)."""
    key = "final_score"
    if obj.get(key) is None and required and obj.get("score") is not None:
        key = "score"
    value = obj.get(key)
    if value is None:
        if required:
            raise ScoreError("missing (no 'final_score' or 'score' key)", "final_score")
        return None
    return _unit_score(value, key)


def parse_assessment(text: str, rubric: Rubric, mode: ScoreMode = "gated") -> Assessment:
    """Read `{"success", "criterion_scores", "final_score", "reason"}` from a scorer reply.

    `gated`: every rubric criterion must be scored exactly once (names matched after strip +
    casefold) with a number in [0, 1]; `final_score` is optional and only range-checked.
    `model_final`: `final_score` (or `score`) is required and must agree with `success` (false
    ⇒ exactly 0, true ⇒ > 0); per-criterion scores are kept when well formed, else left empty.
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    try:
        obj = extract_json_object(text)
    except ReplyParseError as exc:
        raise ScoreError(f"no usable score JSON: {exc}") from exc
    if "success" not in obj:
        raise ScoreError("missing", "success")
    success = obj["success"]
    if not isinstance(success, bool):
        raise ScoreError(f"must be a JSON boolean, got {success!r} ({type(success).__name__})", "success")
    reason = obj.get("reason", "")
    if not isinstance(reason, str):
        raise ScoreError(f"must be a string, got {reason!r}", "reason")

    if mode == "gated":
        scores = _reply_criterion_scores(obj, rubric)
        model_final = _model_final(obj, required=False)
    else:
        model_final = _model_final(obj, required=True)
        assert model_final is not None
        if not success and model_final != 0.0:
            raise ScoreError(f"must be exactly 0 when success is false, got {model_final!r}", "final_score")
        if success and model_final <= 0.0:
            raise ScoreError(f"must be > 0 when success is true, got {model_final!r}", "final_score")
        try:
            scores = _reply_criterion_scores(obj, rubric)
        except ScoreError:
            scores = {}  # diagnostics only in this mode; the score does not depend on them
    return Assessment(success=success, criterion_scores=scores, model_final=model_final, reason=reason.strip())


def gated_score(rubric: Rubric, success: bool, criterion_scores: Mapping[str, float]) -> float:
    """`1[success] · Σ_i w_i s_i`, exactly (no clipping: weights accepted within the rubric's
    tolerance of 1 can give a sum slightly above 1).

    Every rubric criterion must have exactly one score in [0, 1] (names matched after strip +
    casefold); the scores are checked even when `success` is false.
    """
    if not isinstance(success, bool):
        raise ScoreError(f"must be a bool, got {success!r}", "success")
    named: list[tuple[str, Any, str, str]] = []
    for name, value in criterion_scores.items():
        field = f"criterion_scores[{name!r}]"
        if not isinstance(name, str):
            raise ScoreError(f"criterion names must be strings, got {name!r}", field)
        named.append((name, value, field, field))
    scores = _canonical_scores(rubric, named, "criterion_scores")
    if not success:
        return 0.0
    return math.fsum(c.weight * scores[c.name] for c in rubric.criteria)


def final_score(rubric: Rubric, assessment: Assessment, mode: ScoreMode = "gated") -> float:
    """The child's rubric score: the gated weighted sum, or the scorer's own number."""
    if mode == "gated":
        return gated_score(rubric, assessment.success, assessment.criterion_scores)
    if mode == "model_final":
        if assessment.model_final is None:
            raise ScoreError("the assessment has no final_score of the scorer's own", "final_score")
        return assessment.model_final
    raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
