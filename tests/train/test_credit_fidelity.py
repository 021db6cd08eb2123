"""Credit rules checked against the reference on hand-built trees: which launch events enter the
delegation stage's per-rollout mean, what a launch attempt is, and when an agent's error steps
are left untrained (docs/credit.md, "Launch events" and "Error steps")."""

from __future__ import annotations

import pytest

from sera.agents.protocol import CODEACT
from sera.envs.registry import EnvTraining
from sera.train.datums import execution_datums
from sera.train.method import get_method
from sera.train.stage_data import build_batch, succeeded
from sera.types import Action, AgentNode, RolloutTree, Step

CODEACT_ENV = EnvTraining(protocol=CODEACT, label_source="verifier", filter_zero_variance=False,
                          drop_error_steps=True, score_max_tokens_rt=1024)


def chars(text: str) -> list[int]:
    return [ord(c) for c in text]


def decode(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


def cell(code: str, thought: str = "go") -> str:
    return f"<thought>{thought}</thought>\n<python>{code}</python>"


def step(text: str, prompt: str = "p", children: tuple[str, ...] = (), index: int = 0, error: str | None = None) -> Step:
    return Step(index=index, prompt_len=2, prompt_token_ids=chars(prompt), completion_text=text,
                completion_token_ids=chars(text), action=Action(kind="code", body=text),
                observation="o", child_ids=list(children), error=error)


def node(node_id: str, parent: str | None = None, depth: int = 0, **fields) -> AgentNode:
    return AgentNode(id=node_id, parent_id=parent, fork_step=None if parent is None else 0, depth=depth,
                     goal=f"goal of {node_id}", budget=20, **fields)


LAUNCH_TWO = cell("r = await asyncio.gather(launch_subagent({'a': 1}), launch_subagent({'b': 1}))")
LAUNCH_ONE = cell("r = await launch_subagent({'a': 1})")
VIA_HELPER = cell("r = await make_the_part()")  # launches through a function defined in an earlier cell


def hand_case() -> list[RolloutTree]:
    """docs/credit.md's worked example.

    A (root succeeded): n0 launches n1 and n2 in one statement; n1 launches g1 through a helper
    defined in an earlier cell, so its reply has no launch statement (no trainable span).
    Leaves {g1, n2}: n0's event covers both (s = 1.0), n1's covers g1 (s = 0.5).
    B (root succeeded): n0 launches n1 (s = 1.0).
    """
    a = RolloutTree(task_id="t", env="e", root_id="n0", root_success=True, nodes={
        "n0": node("n0", steps=[step(LAUNCH_TWO, children=("n1", "n2"))]),
        "n1": node("n1", "n0", 1, steps=[step(VIA_HELPER, "q", children=("g1",))]),
        "n2": node("n2", "n0", 1, steps=[step(cell("print(1)"), "r")]),
        "g1": node("g1", "n1", 2, steps=[step(cell("print(2)"), "s")]),
    })
    b = RolloutTree(task_id="t", env="e", root_id="n0", root_success=True, nodes={
        "n0": node("n0", steps=[step(LAUNCH_ONE, children=("n1",))]),
        "n1": node("n1", "n0", 1, steps=[step(cell("print(3)"), "q")]),
    })
    return [a, b]


def delegation_advantages(trees, launch_events):
    batch = build_batch([trees], "delegation", get_method("sera", launch_events=launch_events), CODEACT_ENV,
                        decode=decode)
    return {d.trajectory_id: round(d.advantage, 6) for d in batch.datums}, batch.counts


def test_launch_events_reference_leaves_span_less_events_out_of_the_mean():
    # m_A = mean{1.0} = 1.0 (n1's event has no span), m_B = 1.0: A 1 - 1 = 0, B 1 - 1 = 0.
    got, counts = delegation_advantages(hand_case(), "reference")
    assert got == {"t#0/n0": 0.0, "t#1/n0": 0.0}
    assert counts["events_left_out_of_mean"] == 1 and counts["events_trained"] == 2
    assert counts["events_without_span"] == 0


def test_launch_events_all_keeps_them_in_the_mean():
    # m_A = mean{1.0, 0.5} = 0.75, m_B = 1.0: A 1 - 1 = 0, B 1 - 0.75 = 0.25.
    got, counts = delegation_advantages(hand_case(), "all")
    assert got == {"t#0/n0": 0.0, "t#1/n0": 0.25}
    assert counts["events_without_span"] == 1 and counts["events_trained"] == 2
    assert counts["events_left_out_of_mean"] == 0


def test_the_reference_is_the_default_and_unknown_values_are_refused():
    assert get_method("sera").launch_events == "reference"
    with pytest.raises(ValueError, match="launch_events"):
        get_method("sera", launch_events="some")


def test_a_launch_attempt_is_read_from_the_code_only():
    mention = cell("print(view_inventory())", thought="maybe launch_subagent({'a': 1}) later")
    attempt = cell("r = launch_subagent({'a': 1}, bad=")  # does not parse: the whole cell is its span
    trees = [
        RolloutTree(task_id="t", env="e", root_id="n0", root_success=False,
                    nodes={"n0": node("n0", steps=[step(mention)])}),
        RolloutTree(task_id="t", env="e", root_id="n0", root_success=False,
                    nodes={"n0": node("n0", steps=[step(attempt)])}),
    ]
    assert not CODEACT.is_launch_attempt(mention) and CODEACT.is_launch_attempt(attempt)
    got, counts = delegation_advantages(trees, "reference")
    assert counts["invalid_launch_attempts"] == 1 and got == {"t#1/n0": 0.0}


# -- error steps ----------------------------------------------------------------------------------

BAD = cell("print(craft({'m0_i1': 1}, ('m1_i1', 3)))")
GOOD = cell("print(craft({'m0_i1': 3}, ('m1_i1', 3)))")


def error_tree(child: AgentNode, root_success: bool = True) -> RolloutTree:
    root = node("n0", steps=[step(LAUNCH_ONE, children=("n1",))])
    return RolloutTree(task_id="t", env="e", root_id="n0", root_success=root_success,
                       nodes={"n0": root, "n1": child})


def failing_then_good(**fields) -> AgentNode:
    # Prompts that do not extend each other: one datum per trained step.
    return node("n1", "n0", 1, steps=[step(BAD, "q", error="craft failed: wrong amount"),
                                      step(GOOD, "r", index=1)], **fields)


def n1_datums(tree: RolloutTree, method: str):
    batch = build_batch([[tree]], "execution", get_method(method), CODEACT_ENV)
    return [d for d in batch.datums if d.node_id == "n1"]


def test_a_child_that_passed_its_gate_with_score_0_7_has_its_error_step_untrained():
    child = failing_then_good(rubric_score=0.7, rubric_assessment={
        "success": True, "criterion_scores": {}, "model_final": None, "reason": ""})
    tree = error_tree(child)
    datums = n1_datums(tree, "sera")
    assert len(datums) == 1 and datums[0].steps == (1,)
    assert decode([t for t, m in zip(datums[0].tokens, datums[0].mask) if m]) == GOOD
    # the earlier rule (reward >= 1.0) trained both steps, `craft(bad)` included
    assert len(execution_datums(child, 0.7, trajectory_id="x", drop_error_steps=0.7 >= 1.0)) == 2


def test_a_child_that_failed_its_gate_keeps_its_error_steps_trained():
    child = failing_then_good(rubric_score=0.7, rubric_assessment={
        "success": False, "criterion_scores": {}, "model_final": None, "reason": ""})
    assert [d.steps for d in n1_datums(error_tree(child), "sera")] == [(0,), (1,)]


def test_the_gate_for_rao_children_and_the_root():
    method, env = get_method("rao"), CODEACT_ENV
    labelled = error_tree(failing_then_good(verified_success=True))
    assert [d.steps for d in n1_datums(labelled, "rao")] == [(1,)]
    failed = error_tree(failing_then_good(verified_success=False))
    assert [d.steps for d in n1_datums(failed, "rao")] == [(0,), (1,)]
    assert succeeded(labelled, labelled.root, 1.0, method, env)
    lost = error_tree(failing_then_good(verified_success=True), root_success=False)
    assert not succeeded(lost, lost.root, 0.0, method, env)
    # no gate recorded at all: the reward decides, as the reference falls back to it
    ungated = failing_then_good(rubric_score=1.0)
    assert succeeded(error_tree(ungated), ungated, 1.0, get_method("sera"), env)
    assert not succeeded(error_tree(ungated), ungated, 0.9, get_method("sera"), env)
