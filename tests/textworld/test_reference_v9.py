"""The reference V9 loader: hand-written rows in both published formats map to the expected specs."""

from __future__ import annotations

import json

import pytest
from _v9_rows import v9_manifest, v9_row, write_jsonl, write_manifest

from sera.envs.textworld.plan import min_actions
from sera.envs.textworld.reference_plan import plan_dish
from sera.envs.textworld.reference_v9 import ReferenceFormatError, v9_row_to_spec
from sera.envs.textworld.spec import SyncTaskSpec
from sera.envs.textworld.tasks import detect_format, load_task_specs, load_tasks

GATE_LINE = "Some ingredient locations are behind an access gate that must be opened first."
RC_LINE = "The shared inventory can hold at most 2 ingredients at once."


def _rows() -> list[dict]:
    return [
        v9_row(),  # medium fork-join, door, limited inventory (capacity 2)
        v9_row(
            family="dependency_gate", offset=1, seed=850201, family_line=GATE_LINE,
            dependencies=[{"from": "gate_1", "to": "dish_2", "type": "door"}],
        ),
        v9_row(
            family="conflict", difficulty="extreme", offset=2, seed=950602, view="coarse", num_locations=11,
            complexity="high", budget=70, resource_capacity={"knife": 1, "stove": 1},
        ),
        v9_row(
            family="hierarchical", difficulty="easy", offset=3, include_doors=0, limit_inventory=0, num_locations=3,
            cooldown=0, budget=120,
            dependencies=[
                {"from": "root", "to": "dish_1", "type": "decompose"},
                {"from": "dish_1", "to": "dish_1::red apple", "type": "decompose"},
                {"from": "root", "to": "dish_2", "type": "decompose"},
            ],
        ),
        v9_row(
            family="resource_constrained", offset=4, family_line=RC_LINE, resource_capacity={"inventory": 2},
            inventory_capacity=1,
        ),
        v9_row(family="critical_path", difficulty="hard", offset=5, complexity="high"),
    ]


def _check_specs(specs: list[SyncTaskSpec], split: str, rules: str = "reference") -> None:
    fork, gate, conflict, hier, rc, crit = specs
    assert all(s.rules == rules for s in specs)
    # fork-join: ids, family name, fold, rooms, door, capacities, budget, tools
    assert fork.task_id == "cookingworld_multidish_train_multi_dish_fork_join_medium_0000"
    assert (fork.family, fork.difficulty, fork.split, fork.seed) == ("fork_join", "medium", split, 850000)
    assert fork.fold == "train"
    assert fork.rooms == ["kitchen", "pantry", "garden", "supermarket", "hallway", "dining room", "garage", "study", "basement"]
    assert fork.door is not None and fork.door.room == "kitchen"
    assert fork.door.locks_rooms == ["supermarket"] and fork.door.locks_dishes == []
    if rules == "reference":  # the authors' one team inventory of capacity 1 (limitInventorySize)
        assert fork.agent_inventory_capacity is None and fork.shared_inventory_capacity == 1
    else:  # ours: the sampled capacity, per agent
        assert fork.agent_inventory_capacity == 2 and fork.shared_inventory_capacity is None
    assert fork.shared_budget == 96
    assert [(t.name, t.exclusive, t.cooldown_steps) for t in fork.tools] == [
        ("knife", False, 1), ("stove", False, 1), ("oven", False, 1), ("grill", False, 1)
    ]
    assert fork.distractors == []
    apple, water = fork.dishes[0].ingredients
    assert (apple.name, apple.cook, apple.cut, apple.source, apple.branch_work) == (
        "red apple", "roasted", "sliced", "kitchen.counter", 3
    )
    assert apple.candidate_sources == ["kitchen.counter", "garden"]
    assert (water.cook, water.cut, water.source) == ("raw", "uncut", "kitchen.fridge")
    carrot = fork.ingredient("carrot")  # preparation written [cut, cook]
    assert (carrot.cook, carrot.cut, carrot.source, carrot.dish_id) == ("raw", "chopped", "garden", "dish_2")
    assert fork.description_view == "structured" and fork.description.startswith("Prepare and eat 2 independent")
    assert fork.family_sentence == ""
    assert fork.parallelism["shared_environment_max_steps"] == 96
    # dependency gate: gated dish from the dependency edge, family sentence recovered
    assert gate.family == "dependency_gate" and gate.door.locks_dishes == ["dish_2"]
    assert gate.family_sentence == GATE_LINE
    # conflict: exclusive knife and stove, coarse view, all 11 rooms, per-dish complexity
    assert {t.name for t in conflict.tools if t.exclusive} == {"knife", "stove"}
    assert conflict.description_view == "coarse" and "Check the cookbook" in conflict.description
    assert len(conflict.rooms) == 11 and conflict.shared_budget == 70
    assert [d.complexity for d in conflict.dishes] == ["high", "high"]
    # hierarchical, easy: no door, unlimited inventory, at least 4 rooms, decomposition edges
    assert hier.door is None and hier.agent_inventory_capacity is None and hier.shared_inventory_capacity is None
    assert hier.rooms == ["kitchen", "pantry", "garden", "supermarket"]
    assert hier.hierarchy == {"root": ["dish_1", "dish_2"], "dish_1": ["dish_1::red apple"]}
    assert all(t.cooldown_steps == 0 for t in hier.tools)
    # resource constrained: shared capacity from resource_capacity; under sync also the agent's own
    assert rc.shared_inventory_capacity == 2
    assert rc.agent_inventory_capacity == (None if rules == "reference" else 1)
    # critical path: the family's per-dish complexity pattern
    assert [d.complexity for d in crit.dishes] == ["medium", "high"]


def test_v9_jsonl_loads_into_the_expected_specs(tmp_path):
    path = tmp_path / "textworld_train.jsonl"
    write_jsonl(path, _rows())
    assert detect_format(path) == "v9_jsonl"
    _check_specs(load_task_specs(path), "train")  # the authors' files play their game by default
    _check_specs(load_task_specs(path, rules="sync"), "train", rules="sync")
    assert {t.misc["rules"] for t in load_tasks(path)} == {"reference"}


def test_v9_manifest_loads_into_the_same_specs(tmp_path):
    rows = _rows()
    path = tmp_path / "textworld_multidish_validation_200_v9.json"
    write_manifest(path, v9_manifest(rows, split="validation"))
    assert detect_format(path) == "v9_manifest"
    specs = load_task_specs(path)
    _check_specs(specs, "dev")  # manifest fold "validation" -> our split "dev"
    jsonl = tmp_path / "rows.jsonl"
    write_jsonl(jsonl, rows)
    same = [s.model_copy(update={"split": "dev"}) for s in load_task_specs(jsonl)]
    assert specs == same


def test_v9_tasks_are_runtime_tasks_with_plans(tmp_path):
    path = tmp_path / "rows.jsonl"
    write_jsonl(path, _rows())
    tasks = load_tasks(path)
    assert [t.env for t in tasks] == ["textworld-sync"] * 6
    spec = SyncTaskSpec.from_task(tasks[0])
    assert plan_dish(spec, "dish_1")[-2:] == ["prepare dish_1", "eat dish_1"]
    assert min_actions(spec) > 0


@pytest.mark.parametrize(
    ("mutate", "field", "detail"),
    [
        (lambda r: r["dishes"][0]["recipe"][0].__setitem__("preparation", ["roasted"]), "dishes[0].recipe[0].preparation", "one cooking"),
        (lambda r: r["dishes"][1]["recipe"][1].__setitem__("branch_work", 3), "dishes[1].recipe[1].branch_work", "takes 2"),
        (lambda r: r.__setitem__("task_family", "fork-joinn"), "task_family", "multi_dish_fork_join, critical_path"),
        (lambda r: r["parallelism"].pop("mechanisms"), "parallelism.mechanisms", "expected an object"),
        (lambda r: r["game_params"].__setitem__("includeDoors", 2), "game_params.includeDoors", "expected 0 or 1"),
        (lambda r: r.__setitem__("task_description", "something else"), "task_description", "differs"),
        (lambda r: r["parallelism"]["dependencies"].append({"from": "gate_1", "to": "dish_9"}), "parallelism.dependencies[0]", "type"),
    ],
)
def test_malformed_v9_row_names_task_and_field(tmp_path, mutate, field, detail):
    rows = _rows()
    mutate(rows[0])
    path = tmp_path / "bad.jsonl"
    write_jsonl(path, rows)
    with pytest.raises(ReferenceFormatError) as err:
        load_task_specs(path)
    message = str(err.value)
    assert f"{path} line 1" in message
    assert "(task cookingworld_multidish_train_multi_dish_fork_join_medium_0000)" in message
    assert f"field {field}:" in message and detail in message


def test_mapped_spec_problems_are_named():
    row = v9_row(dependencies=[{"from": "gate_1", "to": "dish_9", "type": "door"}])
    with pytest.raises(ReferenceFormatError, match=r"row \(task .*_0000\): mapped spec is invalid: .*dish_9"):
        v9_row_to_spec(row)


def test_malformed_manifest_entry_names_index_and_field(tmp_path):
    manifest = v9_manifest(_rows())
    manifest["tasks"][2]["game_params"] = "{not json"
    path = tmp_path / "m.json"
    write_manifest(path, manifest)
    with pytest.raises(ReferenceFormatError, match=r"tasks\[2\] \(task .*conflict_extreme_0002\): field game_params"):
        load_task_specs(path)
    manifest = v9_manifest(_rows())
    manifest["task_count"] = 7
    write_manifest(path, manifest)
    with pytest.raises(ReferenceFormatError, match="task_count: says 7 but tasks has 6"):
        load_task_specs(path)


def test_duplicate_v9_ids_are_refused(tmp_path):
    path = tmp_path / "dup.jsonl"
    write_jsonl(path, [v9_row(), v9_row()])
    with pytest.raises(ReferenceFormatError, match=r"line 2 .*duplicate \(first at .*line 1\)"):
        load_task_specs(path)


def test_single_line_manifest_is_detected(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(v9_manifest(_rows()[:1])), encoding="utf-8")
    assert detect_format(path) == "v9_manifest"
    assert len(load_task_specs(path)) == 1
