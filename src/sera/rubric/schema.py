"""The rubric record and its strict parser.

A rubric is what a parent writes for a delegated subtask before the child runs (sera-spec §4):
weighted criteria, a success gate and failure conditions. It is frozen once written; its hash
is taken from the canonical JSON form so that a stored rubric can be shown to be the one that
scored a child.

The parser is strict by default (design "Where we intend to differ" item 3, fixing sera-spec
§11.1 item 3): 4 to 8 criteria, weights that are real JSON numbers, finite, non-negative and
summing to 1 within a tolerance, kept exactly as written. `REFERENCE` reproduces the released
parser's looser rules (§4.3) for users who need to match its checkpoints.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict

from sera.judge.parse import ReplyParseError, extract_json_object
from sera.types import Record

_FROZEN = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)


class FieldError(ValueError):
    """Bad model output located by field: `field` is the dotted path of the offending field
    (e.g. `rubric_items[2].weight`), or None when the reply holds no usable JSON object at all."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


class RubricError(FieldError):
    """A rubric reply or dict that breaks the schema; the message names the field and value."""


class Criterion(Record):
    """One weighted rubric item."""

    model_config = _FROZEN

    name: str
    """Short unique name (unique case-insensitively); the scorer reports scores by this name."""
    weight: float
    """Share of the total score this criterion carries (non-negative; all weights sum to 1)."""
    description: str
    """What the criterion checks in the child's trajectory and final state."""
    score_0: str
    """What earns a score of 0 on this criterion."""
    score_full: str
    """What earns full credit (a score of 1) on this criterion."""


class Rubric(Record):
    """A frozen rubric: weighted criteria behind a success gate.

    Build one with `parse_rubric` / `rubric_from_dict`, which enforce the limits; the
    constructor only checks types.
    """

    model_config = _FROZEN

    criteria: tuple[Criterion, ...]
    """The weighted items, in the order the writer gave them."""
    success_gate: str
    """The condition without which the child scores exactly 0 (task not completed)."""
    failure_conditions: tuple[str, ...]
    """Concrete ways the child can fail; any of them means the gate is not passed."""
    scoring_procedure: str = ""
    """The writer's instructions for applying the gate and combining the criteria."""

    def to_dict(self) -> dict[str, Any]:
        """The canonical JSON-able form, in the published schema (`rubric_items`, ...)."""
        return {
            "rubric_items": [
                {
                    "name": c.name,
                    "weight": c.weight,
                    "description": c.description,
                    "score_0": c.score_0,
                    "score_full": c.score_full,
                }
                for c in self.criteria
            ],
            "success_gate": self.success_gate,
            "failure_conditions": list(self.failure_conditions),
            "scoring_procedure": self.scoring_procedure,
        }

    def hash(self) -> str:
        """sha256 hex digest of the canonical JSON (sorted keys, no spaces, UTF-8 kept)."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def weight_of(self, name: str) -> float:
        """Weight of the criterion called `name` (matched after strip + casefold)."""
        key = name.strip().casefold()
        for c in self.criteria:
            if c.name.strip().casefold() == key:
                return c.weight
        raise KeyError(f"no criterion named {name!r}; criteria are {[c.name for c in self.criteria]}")


@dataclass(frozen=True)
class RubricLimits:
    """What a rubric must satisfy to be accepted."""

    min_criteria: int = 4
    """Fewest rubric items accepted."""
    max_criteria: int | None = 8
    """Most rubric items accepted; None for no maximum."""
    weight_tolerance: float = 1e-3
    """How far the weight sum may be from 1 (ignored when `renormalise` is set)."""
    renormalise: bool = False
    """Divide weights by their total instead of requiring them to sum to 1 (reference parser)."""
    require_score_anchors: bool = True
    """`score_0` / `score_full` must be present; when False a missing one becomes ''."""
    min_failure_conditions: int = 1
    """Fewest failure conditions accepted."""

    def __post_init__(self) -> None:
        if self.min_criteria < 1:
            raise ValueError(f"RubricLimits.min_criteria must be >= 1, got {self.min_criteria}")
        if self.max_criteria is not None and self.max_criteria < self.min_criteria:
            raise ValueError(
                f"RubricLimits.max_criteria ({self.max_criteria}) is below min_criteria ({self.min_criteria})"
            )
        if not (math.isfinite(self.weight_tolerance) and self.weight_tolerance >= 0):
            raise ValueError(f"RubricLimits.weight_tolerance must be finite and >= 0, got {self.weight_tolerance}")
        if self.min_failure_conditions < 0:
            raise ValueError(f"RubricLimits.min_failure_conditions must be >= 0, got {self.min_failure_conditions}")


STRICT = RubricLimits()
"""The method as the paper describes it: 4-8 criteria, weights summing to 1, kept as written."""

REFERENCE = RubricLimits(
    min_criteria=2, max_criteria=None, renormalise=True, require_score_anchors=False, min_failure_conditions=0
)
"""The released parser's rules (sera-spec §4.3), to reproduce its checkpoints: >= 2 items, no
maximum, weights renormalised; negative or non-finite weights and a zero total still fail."""


def parse_rubric(text: str, limits: RubricLimits = STRICT) -> Rubric:
    """The rubric in a model reply (bare JSON, a fenced block, or an object inside prose)."""
    try:
        data = extract_json_object(text)
    except ReplyParseError as exc:
        raise RubricError(f"no usable rubric JSON: {exc}") from exc
    return rubric_from_dict(data, limits)


def rubric_from_dict(data: Mapping[str, Any], limits: RubricLimits = STRICT) -> Rubric:
    """Validate a rubric in the published schema; unknown top-level keys are ignored."""
    if not isinstance(data, Mapping):
        raise RubricError(f"a rubric must be a JSON object, got {_describe(data)}")
    if "rubric_items" not in data:
        raise RubricError(f"missing (keys present: {sorted(map(str, data))})", "rubric_items")
    items = data["rubric_items"]
    if not isinstance(items, list):
        raise RubricError(f"must be a list of objects, got {_describe(items)}", "rubric_items")
    _check_count(len(items), limits)

    criteria: list[Criterion] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        where = f"rubric_items[{i}]"
        if not isinstance(item, Mapping):
            raise RubricError(f"must be an object, got {_describe(item)}", where)
        name = _text(item, "name", where, required=True, non_empty=True)
        key = name.casefold()
        if key in seen:
            raise RubricError(
                f"duplicate criterion name {name!r} (same as rubric_items[{seen[key]}], ignoring case)",
                f"{where}.name",
            )
        seen[key] = i
        criteria.append(
            Criterion(
                name=name,
                weight=_weight(item, where),
                description=_text(item, "description", where, required=True, non_empty=True),
                score_0=_text(item, "score_0", where, required=limits.require_score_anchors),
                score_full=_text(item, "score_full", where, required=limits.require_score_anchors),
            )
        )
    criteria = _check_weights(criteria, limits)

    return Rubric(
        criteria=tuple(criteria),
        success_gate=_text(data, "success_gate", "", required=True, non_empty=True),
        failure_conditions=_failure_conditions(data, limits),
        scoring_procedure=_text(data, "scoring_procedure", "", required=False),
    )


# -- field checks ------------------------------------------------------------------------------


def _describe(value: Any) -> str:
    """A value and its JSON kind, for error messages (`'0.3' (a string)`)."""
    kinds = {bool: "a boolean", str: "a string", list: "a list", dict: "an object", type(None): "null"}
    kind = kinds.get(type(value))
    text = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    return f"{text} ({kind})" if kind else text


def _check_count(n: int, limits: RubricLimits) -> None:
    low, high = limits.min_criteria, limits.max_criteria
    if n < low or (high is not None and n > high):
        wanted = f"{low} to {high}" if high is not None else f"at least {low}"
        raise RubricError(f"must hold {wanted} criteria, got {n}", "rubric_items")


def _text(obj: Mapping[str, Any], key: str, where: str, *, required: bool, non_empty: bool = False) -> str:
    """A string field, stripped; `where` is the dotted path of `obj` ('' for the top level)."""
    field = f"{where}.{key}" if where else key
    if key not in obj:
        if required:
            raise RubricError("missing", field)
        return ""
    value = obj[key]
    if not isinstance(value, str):
        raise RubricError(f"must be a string, got {_describe(value)}", field)
    value = value.strip()
    if non_empty and not value:
        raise RubricError("must be a non-empty string, got ''", field)
    return value


def _weight(item: Mapping[str, Any], where: str) -> float:
    field = f"{where}.weight"
    if "weight" not in item:
        raise RubricError("missing", field)
    value = item["weight"]
    # bool is an int subclass in Python, but `true` is not a number in JSON.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RubricError(f"must be a JSON number, got {_describe(value)}", field)
    weight = float(value)
    if not math.isfinite(weight) or weight < 0:
        raise RubricError(f"must be a finite number >= 0, got {value!r}", field)
    return weight


def _check_weights(criteria: list[Criterion], limits: RubricLimits) -> list[Criterion]:
    total = math.fsum(c.weight for c in criteria)
    if limits.renormalise:
        if total <= 0:
            raise RubricError(f"weights sum to {total:g}; they must have a positive total", "rubric_items")
        return [c.model_copy(update={"weight": c.weight / total}) for c in criteria]
    if abs(total - 1.0) > limits.weight_tolerance:
        raise RubricError(
            f"weights sum to {total:.6g}; they must sum to 1 (±{limits.weight_tolerance:g})", "rubric_items"
        )
    return criteria


def _failure_conditions(data: Mapping[str, Any], limits: RubricLimits) -> tuple[str, ...]:
    field = "failure_conditions"
    if field not in data:
        if limits.min_failure_conditions > 0:
            raise RubricError("missing", field)
        return ()
    value = data[field]
    if not isinstance(value, list):
        raise RubricError(f"must be a list of strings, got {_describe(value)}", field)
    if len(value) < limits.min_failure_conditions:
        raise RubricError(f"must hold at least {limits.min_failure_conditions} condition(s), got {len(value)}", field)
    out = []
    for i, cond in enumerate(value):
        if not isinstance(cond, str) or not cond.strip():
            raise RubricError(f"must be a non-empty string, got {_describe(cond)}", f"{field}[{i}]")
        out.append(cond.strip())
    return tuple(out)
