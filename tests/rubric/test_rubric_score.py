"""Scorer replies and the gated weighted score."""

from __future__ import annotations

import json

import pytest

from sera.rubric import Assessment, ScoreError, final_score, gated_score, parse_assessment, rubric_from_dict

NAMES = ["Goal", "Grounding", "Utility", "Efficiency"]


@pytest.fixture
def rubric():
    return rubric_from_dict(
        {
            "rubric_items": [
                {"name": n, "weight": w, "description": f"{n} check", "score_0": "none", "score_full": "all"}
                for n, w in zip(NAMES, (0.4, 0.3, 0.2, 0.1), strict=True)
            ],
            "success_gate": "the item exists",
            "failure_conditions": ["no item"],
        }
    )


def reply(success=True, scores=(1, 0.5, 0, 1), names=NAMES, **extra):
    body = {
        "success": success,
        "criterion_scores": [{"name": n, "score": s, "reason": "seen"} for n, s in zip(names, scores, strict=False)],
        "reason": "overall",
    }
    body.update(extra)
    return json.dumps(body)


def score_error(text, rubric, mode="gated") -> ScoreError:
    with pytest.raises(ScoreError) as info:
        parse_assessment(text, rubric, mode)
    return info.value


# -- gated_score -------------------------------------------------------------------------------


def test_gated_score_is_the_weighted_sum_when_successful(rubric):
    scores = dict(zip(NAMES, (1, 0.5, 0, 1), strict=True))
    assert gated_score(rubric, True, scores) == pytest.approx(0.4 + 0.15 + 0.0 + 0.1)  # 0.65
    assert gated_score(rubric, True, dict.fromkeys(NAMES, 1.0)) == pytest.approx(1.0)
    assert gated_score(rubric, True, dict.fromkeys(NAMES, 0.0)) == 0.0


def test_gated_score_is_zero_when_the_gate_fails(rubric):
    assert gated_score(rubric, False, dict.fromkeys(NAMES, 1.0)) == 0.0


def test_gated_score_matches_names_ignoring_case_and_spaces(rubric):
    scores = {" goal ": 1, "GROUNDING": 1, "utility": 0, "Efficiency": 0}
    assert gated_score(rubric, True, scores) == pytest.approx(0.7)


def test_gated_score_is_exact_without_clipping():
    loose = rubric_from_dict(
        {
            "rubric_items": [
                {"name": f"c{i}", "weight": w, "description": "d", "score_0": "", "score_full": ""}
                for i, w in enumerate((0.4, 0.3, 0.2, 0.1005))
            ],
            "success_gate": "g",
            "failure_conditions": ["f"],
        }
    )
    assert gated_score(loose, True, {f"c{i}": 1.0 for i in range(4)}) == pytest.approx(1.0005)


@pytest.mark.parametrize(
    ("scores", "fragment"),
    [
        ({"Goal": 1, "Grounding": 1, "Utility": 1}, "no score for criterion(s) ['Efficiency']"),
        ({**dict.fromkeys(NAMES, 1), "Style": 1}, "unknown criterion 'Style'"),
        ({**dict.fromkeys(NAMES, 1), "goal": 1}, "scored twice"),
        ({**dict.fromkeys(NAMES, 1), "Utility": 1.2}, "must be a number in [0, 1], got 1.2"),
        ({**dict.fromkeys(NAMES, 1), "Utility": -0.1}, "got -0.1"),
        ({**dict.fromkeys(NAMES, 1), "Utility": float("nan")}, "got nan"),
        ({**dict.fromkeys(NAMES, 1), "Utility": True}, "got True"),
    ],
)
def test_gated_score_rejects_bad_scores_even_when_gate_fails(rubric, scores, fragment):
    for success in (True, False):
        with pytest.raises(ScoreError) as info:
            gated_score(rubric, success, scores)
        assert fragment in str(info.value)


# -- parse_assessment, gated mode --------------------------------------------------------------


def test_parse_gated_reply_keys_scores_by_rubric_names(rubric):
    text = "```json\n" + reply(names=["goal", " Grounding", "UTILITY", "efficiency"], final_score=0.9) + "\n```"
    assessment = parse_assessment(text, rubric)
    assert assessment == Assessment(
        success=True,
        criterion_scores={"Goal": 1.0, "Grounding": 0.5, "Utility": 0.0, "Efficiency": 1.0},
        model_final=0.9,
        reason="overall",
    )
    # The scorer's own number is a diagnostic: the gated score is recomputed from the criteria.
    assert final_score(rubric, assessment) == pytest.approx(0.65)
    assert final_score(rubric, assessment, "model_final") == 0.9


def test_gated_reply_with_failed_gate_scores_zero(rubric):
    assessment = parse_assessment(reply(success=False), rubric)
    assert assessment.model_final is None
    assert final_score(rubric, assessment) == 0.0


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [
        (reply(scores=(1, 1, 1)), "criterion_scores", "no score for criterion(s) ['Efficiency']"),
        (reply(scores=(1,) * 5, names=[*NAMES, "Style"]), "criterion_scores[4].name", "unknown criterion 'Style'"),
        (reply(scores=(1,) * 5, names=[*NAMES, "GOAL"]), "criterion_scores[4].name", "scored twice"),
        (reply(scores=(1, 1.2, 1, 1)), "criterion_scores[1].score", "got 1.2"),
        (reply(scores=(1, "0.5", 1, 1)), "criterion_scores[1].score", "got '0.5'"),
        (reply(success="true"), "success", "must be a JSON boolean, got 'true'"),
        (reply(success=1), "success", "got 1"),
        (json.dumps({"criterion_scores": []}), "success", "missing"),
        (json.dumps({"success": True, "final_score": 0.5}), "criterion_scores", "missing"),
        (json.dumps({"success": True, "criterion_scores": "all good"}), "criterion_scores", "must be a list"),
        (json.dumps({"success": True, "criterion_scores": [{"score": 1}]}), "criterion_scores[0].name", "non-empty"),
        (json.dumps({"success": True, "criterion_scores": [{"name": "Goal"}]}), "criterion_scores[0].score", "missing"),
        (reply(final_score=1.5), "final_score", "got 1.5"),
        (reply(reason=3), "reason", "must be a string"),
    ],
)
def test_gated_parse_errors_name_their_field(rubric, text, field, fragment):
    err = score_error(text, rubric)
    assert err.field == field
    assert str(err).startswith(f"{field}: ") and fragment in str(err)


@pytest.mark.parametrize("text", ["", "the agent did well", '{"success": true, "criterion_scores": ['])
def test_unusable_json_is_an_error_without_field(rubric, text):
    err = score_error(text, rubric)
    assert err.field is None and "no usable score JSON" in str(err)


def test_unknown_mode_is_rejected(rubric):
    with pytest.raises(ValueError, match="mode"):
        parse_assessment(reply(), rubric, "average")  # type: ignore[arg-type]


# -- parse_assessment, model_final mode (reference) --------------------------------------------


def test_model_final_mode_uses_the_scorers_number(rubric):
    assessment = parse_assessment(reply(final_score=0.8), rubric, "model_final")
    assert final_score(rubric, assessment, "model_final") == 0.8
    assert assessment.criterion_scores["Grounding"] == 0.5


def test_model_final_mode_falls_back_to_score_key(rubric):
    assessment = parse_assessment(json.dumps({"success": True, "score": 0.7}), rubric, "model_final")
    assert assessment.model_final == 0.7
    assert assessment.criterion_scores == {}  # none given: left empty, not an error in this mode


def test_model_final_mode_tolerates_malformed_criterion_scores(rubric):
    assessment = parse_assessment(reply(scores=(1, 9, 1, 1), final_score=0.6), rubric, "model_final")
    assert assessment.criterion_scores == {} and assessment.model_final == 0.6
    with pytest.raises(ScoreError):
        final_score(rubric, assessment, "gated")


@pytest.mark.parametrize(
    ("success", "value", "fragment"),
    [
        (False, 0.3, "must be exactly 0 when success is false, got 0.3"),
        (True, 0.0, "must be > 0 when success is true, got 0.0"),
        (True, 1.01, "got 1.01"),
        (True, None, "missing"),
    ],
)
def test_model_final_consistency_rules(rubric, success, value, fragment):
    err = score_error(reply(success=success, final_score=value), rubric, "model_final")
    assert err.field == "final_score" and fragment in str(err)


def test_model_final_mode_accepts_consistent_failure(rubric):
    assessment = parse_assessment(reply(success=False, final_score=0), rubric, "model_final")
    assert final_score(rubric, assessment, "model_final") == 0.0


def test_final_score_model_final_without_number_is_an_error(rubric):
    assessment = parse_assessment(reply(), rubric)
    with pytest.raises(ScoreError, match="final_score"):
        final_score(rubric, assessment, "model_final")
