"""The rubric record and its parser: strict rules, reference mode, canonical form and hash."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from sera.envs.textcraft.global_rubric import GLOBAL_TEXTCRAFT_RUBRIC
from sera.rubric import (
    REFERENCE,
    STRICT,
    Rubric,
    RubricError,
    RubricLimits,
    parse_rubric,
    rubric_from_dict,
)


def rubric_dict(weights=(0.4, 0.3, 0.2, 0.1), **top):
    data = {
        "rubric_items": [
            {
                "name": f"Criterion {i}",
                "weight": w,
                "description": f"checks thing {i}",
                "score_0": f"thing {i} absent",
                "score_full": f"thing {i} done",
            }
            for i, w in enumerate(weights)
        ],
        "success_gate": "The requested item is in the inventory.",
        "failure_conditions": ["gave up", "claimed an item it did not craft"],
        "scoring_procedure": "gate first, then weighted sum",
    }
    data.update(top)
    return data


def error_of(data, limits=STRICT) -> RubricError:
    with pytest.raises(RubricError) as info:
        rubric_from_dict(data, limits)
    return info.value


def test_valid_rubric_keeps_weights_as_written():
    rubric = rubric_from_dict(rubric_dict())
    assert [c.weight for c in rubric.criteria] == [0.4, 0.3, 0.2, 0.1]
    assert rubric.criteria[2].name == "Criterion 2"
    assert rubric.failure_conditions == ("gave up", "claimed an item it did not craft")
    assert rubric.weight_of("  criterion 1 ") == 0.3
    with pytest.raises(KeyError, match="Nope"):
        rubric.weight_of("Nope")


def test_to_dict_round_trips_in_published_schema():
    rubric = rubric_from_dict(rubric_dict())
    out = rubric.to_dict()
    assert set(out) == {"rubric_items", "success_gate", "failure_conditions", "scoring_procedure"}
    assert set(out["rubric_items"][0]) == {"name", "weight", "description", "score_0", "score_full"}
    assert rubric_from_dict(json.loads(json.dumps(out))) == rubric


@pytest.mark.parametrize("count", [3, 9])
def test_criteria_count_outside_4_to_8_is_rejected(count):
    err = error_of(rubric_dict(weights=[1 / count] * count))
    assert err.field == "rubric_items"
    assert f"got {count}" in str(err) and "4 to 8" in str(err)


@pytest.mark.parametrize("count", [4, 8])
def test_criteria_count_at_the_bounds_is_accepted(count):
    assert len(rubric_from_dict(rubric_dict(weights=[1 / count] * count)).criteria) == count


@pytest.mark.parametrize(
    ("weight", "fragment"),
    [
        (-0.1, "must be a finite number >= 0, got -0.1"),
        (True, "must be a JSON number, got True (a boolean)"),
        ("0.3", "must be a JSON number, got '0.3' (a string)"),
        (float("nan"), "got nan"),
        (float("inf"), "got inf"),
        (None, "got None (null)"),
    ],
)
def test_bad_weight_names_field_and_value(weight, fragment):
    data = rubric_dict()
    data["rubric_items"][2]["weight"] = weight
    err = error_of(data)
    assert err.field == "rubric_items[2].weight"
    assert str(err).startswith("rubric_items[2].weight: ")
    assert fragment in str(err)


def test_nan_weight_written_as_json_literal_is_rejected():
    text = json.dumps(rubric_dict()).replace('"weight": 0.1', '"weight": NaN')
    assert "NaN" in text
    with pytest.raises(RubricError) as info:
        parse_rubric(text)
    assert info.value.field == "rubric_items[3].weight"


def test_weight_sum_off_by_more_than_tolerance_is_rejected():
    err = error_of(rubric_dict(weights=(0.4, 0.3, 0.2, 0.05)))
    assert err.field == "rubric_items"
    assert "weights sum to 0.95; they must sum to 1 (±0.001)" in str(err)


def test_weight_sum_within_tolerance_is_accepted_and_not_renormalised():
    rubric = rubric_from_dict(rubric_dict(weights=(0.4, 0.3, 0.2, 0.1005)))
    assert math.fsum(c.weight for c in rubric.criteria) == pytest.approx(1.0005)
    assert rubric.criteria[3].weight == 0.1005


def test_duplicate_names_ignoring_case_and_spaces_are_rejected():
    data = rubric_dict()
    data["rubric_items"][3]["name"] = "  criterion 1 "
    err = error_of(data)
    assert err.field == "rubric_items[3].name"
    assert "duplicate" in str(err) and "rubric_items[1]" in str(err)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(success_gate="  "), "success_gate"),
        (lambda d: d.pop("success_gate"), "success_gate"),
        (lambda d: d.update(success_gate=3), "success_gate"),
        (lambda d: d.pop("rubric_items"), "rubric_items"),
        (lambda d: d.update(rubric_items={"a": 1}), "rubric_items"),
        (lambda d: d["rubric_items"].__setitem__(1, "just text"), "rubric_items[1]"),
        (lambda d: d["rubric_items"][0].update(name=""), "rubric_items[0].name"),
        (lambda d: d["rubric_items"][0].pop("description"), "rubric_items[0].description"),
        (lambda d: d["rubric_items"][0].pop("weight"), "rubric_items[0].weight"),
        (lambda d: d["rubric_items"][0].pop("score_0"), "rubric_items[0].score_0"),
        (lambda d: d["rubric_items"][0].update(score_full=1), "rubric_items[0].score_full"),
        (lambda d: d.update(failure_conditions=[]), "failure_conditions"),
        (lambda d: d.update(failure_conditions="gave up"), "failure_conditions"),
        (lambda d: d.update(failure_conditions=["ok", ""]), "failure_conditions[1]"),
        (lambda d: d.update(scoring_procedure=["step 1"]), "scoring_procedure"),
    ],
)
def test_every_schema_error_names_its_field(mutate, field):
    data = rubric_dict()
    mutate(data)
    err = error_of(data)
    assert err.field == field
    assert str(err).startswith(f"{field}: ")


def test_missing_rubric_items_lists_the_keys_present():
    err = error_of({"criteria": [], "success_gate": "x"})
    assert err.field == "rubric_items" and "criteria" in str(err) and "missing" in str(err)


def test_unknown_top_level_keys_and_missing_procedure_are_fine():
    data = rubric_dict(commentary="I think this is a good rubric")
    del data["scoring_procedure"]
    assert rubric_from_dict(data).scoring_procedure == ""


@pytest.mark.parametrize(
    "text",
    ['{"rubric_items": [{"name": "a", "weight": 0.5}', "no rubric here", '{"rubric_items": [1,]}', ""],
)
def test_malformed_or_truncated_json_is_an_error_without_field(text):
    with pytest.raises(RubricError) as info:
        parse_rubric(text)
    assert info.value.field is None
    assert "no usable rubric JSON" in str(info.value)


def test_fenced_block_and_prose_around_object_are_accepted():
    body = json.dumps(rubric_dict())
    fenced = f"Here is the rubric:\n```json\n{body}\n```\nGood luck."
    prose = f"Sure! {body} Hope that helps."
    assert parse_rubric(fenced) == parse_rubric(body) == parse_rubric(prose)


def test_reference_mode_accepts_two_items_and_renormalises():
    data = rubric_dict(weights=(2, 2))
    for item in data["rubric_items"]:
        del item["score_0"], item["score_full"]
    data["failure_conditions"] = []
    assert error_of(data).field == "rubric_items"  # strict: too few
    rubric = rubric_from_dict(data, REFERENCE)
    assert [c.weight for c in rubric.criteria] == [0.5, 0.5]
    assert rubric.criteria[0].score_0 == "" and rubric.criteria[1].score_full == ""


def test_reference_mode_accepts_many_items_but_still_rejects_bad_weights():
    rubric = rubric_from_dict(rubric_dict(weights=[1] * 12), REFERENCE)
    assert len(rubric.criteria) == 12 and sum(c.weight for c in rubric.criteria) == pytest.approx(1)
    assert error_of(rubric_dict(weights=(0, 0, 0)), REFERENCE).field == "rubric_items"
    assert "positive total" in str(error_of(rubric_dict(weights=(0, 0, 0)), REFERENCE))
    assert error_of(rubric_dict(weights=(1, -1, 1)), REFERENCE).field == "rubric_items[1].weight"
    assert error_of(rubric_dict(weights=(1, float("inf"))), REFERENCE).field == "rubric_items[1].weight"


def test_hash_is_stable_across_key_order_and_whitespace():
    data = rubric_dict()
    compact = json.dumps(data, separators=(",", ":"))
    items = [dict(reversed(list(item.items()))) for item in data["rubric_items"]]
    reversed_keys = {k: data[k] for k in reversed(list(data))} | {"rubric_items": items}
    reordered = "\n  " + json.dumps(reversed_keys, indent=4) + "\n"
    assert compact != reordered
    first = parse_rubric(compact).hash()
    assert parse_rubric(reordered).hash() == first
    assert len(first) == 64 and int(first, 16) >= 0


def test_hash_changes_when_a_weight_changes():
    base = rubric_from_dict(rubric_dict()).hash()
    assert rubric_from_dict(rubric_dict(weights=(0.35, 0.35, 0.2, 0.1))).hash() != base


def test_rubric_is_frozen():
    rubric = rubric_from_dict(rubric_dict())
    with pytest.raises(ValidationError):
        rubric.success_gate = "anything goes"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        rubric.criteria[0].weight = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        rubric.criteria[0] = rubric.criteria[1]  # type: ignore[index]


def test_global_textcraft_rubric():
    rubric = GLOBAL_TEXTCRAFT_RUBRIC
    assert isinstance(rubric, Rubric)
    assert len(rubric.criteria) == 5
    assert math.fsum(c.weight for c in rubric.criteria) == pytest.approx(1.0, abs=1e-12)
    assert {c.name: c.weight for c in rubric.criteria} == {
        "Goal Fulfillment": 0.40,
        "Correctness and Grounding": 0.25,
        "Utility to Parent": 0.15,
        "Action Validity": 0.10,
        "Efficiency": 0.10,
    }
    assert len(rubric.failure_conditions) == 4 and rubric.success_gate
    assert all(c.description and c.score_0 and c.score_full for c in rubric.criteria)
    assert rubric_from_dict(rubric.to_dict()) == rubric


@pytest.mark.parametrize(
    "kwargs",
    [{"min_criteria": 0}, {"min_criteria": 5, "max_criteria": 4}, {"weight_tolerance": -1.0},
     {"min_failure_conditions": -1}],
)
def test_inconsistent_limits_are_rejected(kwargs):
    with pytest.raises(ValueError, match="RubricLimits"):
        RubricLimits(**kwargs)
