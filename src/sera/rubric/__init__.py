"""Rubrics: the parent writes one for a delegated subtask before the child runs; the policy
scores the finished child with it (sera-spec §4).

`schema`: the `Rubric` record and its strict parser (`STRICT` limits; `REFERENCE` for the
released code's rules). `prompts`: the writer's and the scorer's messages. `score`: parsing the
scorer's reply and the gated weighted score. An environment's fixed rubric for the global-rubric
ablation lives with the environment (`EnvSpec.global_rubric`).
"""

from sera.rubric.prompts import (
    RUBRIC_SCORER_MARKER,
    RUBRIC_WRITER_MARKER,
    RubricContext,
    build_rubric_messages,
    build_scoring_messages,
    render_child_trajectory,
)
from sera.rubric.schema import (
    REFERENCE,
    STRICT,
    Criterion,
    Rubric,
    RubricError,
    RubricLimits,
    parse_rubric,
    rubric_from_dict,
)
from sera.rubric.score import (
    Assessment,
    ScoreError,
    ScoreMode,
    final_score,
    gated_score,
    parse_assessment,
)

__all__ = [
    "REFERENCE",
    "RUBRIC_SCORER_MARKER",
    "RUBRIC_WRITER_MARKER",
    "STRICT",
    "Assessment",
    "Criterion",
    "Rubric",
    "RubricContext",
    "RubricError",
    "RubricLimits",
    "ScoreError",
    "ScoreMode",
    "build_rubric_messages",
    "build_scoring_messages",
    "final_score",
    "gated_score",
    "parse_assessment",
    "parse_rubric",
    "render_child_trajectory",
    "rubric_from_dict",
]
