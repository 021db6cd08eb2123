"""The TextCraft loop detector: the rule on cell histories, and its forced finish through the runtime."""

import asyncio

import pytest

from sera.envs.textcraft.env import root_env_factory
from sera.envs.textcraft.loop_detector import FINISH_MESSAGE, LoopDetector, is_loop_stop
from sera.runtime import Completion, RuntimeConfig, SamplingParams, run_rollout
from sera.testing.tiny import tiny_tokenizer
from sera.policy.tokenizing_policy import TokenizingPolicy
from sera.train.datums import execution_datums
from sera.types import Message

from test_textcraft_env import A, B, BOOK, RA, RB, Script, _cell, _craft_code, _task

DETECTOR = LoopDetector()


@pytest.mark.parametrize(
    ("codes", "period"),
    [
        (["a"] * 4, 1),
        (["x", "a", "a", "a", "a"], 1),
        (["a", "b"] * 4, 2),
        (["a", "b", "c"] * 4, 3),
        (["a ", "\n a", "a\n\n", "  a  "], 1),  # compared with surrounding whitespace removed
        (["", "", "", ""], 1),  # replies without code count as the empty cell
        (["a"] * 3, None),  # three repeats are not enough
        (["a", "b"] * 3 + ["a"], None),
        (["a", "b", "c", "d"] * 4, None),  # period 4 is longer than the reference looks
        (["a", "a", "b", "a"], None),
        ([], None),
    ],
)
def test_period_of_a_cell_history(codes, period):
    assert DETECTOR.period(codes) == period


def test_the_shortest_period_is_reported_and_the_numbers_are_settings():
    assert DETECTOR.period(["a"] * 12) == 1
    assert LoopDetector(repeats=2, max_period=4).period(["a", "b", "c", "d"] * 2) == 4
    with pytest.raises(ValueError):
        LoopDetector(repeats=1)


class Counting(Script):
    """A script that counts its calls (the forced finish must make none)."""

    calls = 0

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        self.calls += 1
        return await super().__call__(messages, sampling)


def _run(task, script, loop_detector=True, **config):
    factory = root_env_factory(task, BOOK, loop_detector=loop_detector)
    return asyncio.run(run_rollout(task, script, factory, RuntimeConfig(**config)))


def test_a_looping_agent_is_finished_without_a_model_call():
    task = _task({A: RA.result_count})
    script = Counting({task.goal: [_cell("print(view_inventory())")]})
    tree = _run(task, script)
    root = tree.root
    assert script.calls == 4 and len(root.steps) == 5  # the fifth step is the detector's, not the model's
    assert root.finish_message == FINISH_MESSAGE and is_loop_stop(root.finish_message)
    assert root.error is None and tree.counters["policy_calls"] == 4
    forced = root.steps[-1]
    assert forced.forced == "loop_detector" and forced.completion_token_ids is None
    assert forced.completion_text == f"<python>\nfinish({FINISH_MESSAGE!r})\n</python>"
    assert all(s.forced is None and s.completion_text == _cell("print(view_inventory())") for s in root.steps[:-1])
    assert tree.root_success is False  # a non-empty finish, but nothing was crafted


def test_a_forced_finish_after_the_work_is_done_still_verifies():
    # The reference's verifier only needs a non-empty finish message and the crafted items.
    task = _task({A: RA.result_count})
    script = Counting({task.goal: [_cell(_craft_code(A, RA)), _cell("print('checking')")]})
    tree = _run(task, script)
    assert len(tree.root.steps) == 6 and is_loop_stop(tree.root.finish_message)
    assert tree.root_success is True


def test_a_period_two_loop_and_the_switch():
    task = _task({A: RA.result_count})
    replies = [_cell("print(1)"), _cell("print(2)")] * 10
    on = _run(task, Counting({task.goal: replies}))
    assert len(on.root.steps) == 9 and is_loop_stop(on.root.finish_message) and on.root.steps[-1].forced
    off = _run(task, Counting({task.goal: replies}), loop_detector=False)
    assert len(off.root.steps) == 20 and off.root.finish_message is None and "exhausted the budget" in off.root.error


def test_no_forced_finish_when_the_budget_has_no_step_left():
    # The reference runs the forced finish as one more step, which an exhausted budget does not allow.
    task = _task({A: RA.result_count})
    tree = _run(task, Counting({task.goal: [_cell("print(1)")]}), max_calls_per_agent=4)
    assert len(tree.root.steps) == 4 and tree.root.finish_message is None
    assert "exhausted the budget of 4" in tree.root.error


def test_a_looping_child_reports_the_detectors_message_to_its_parent():
    task = _task({A: RA.result_count, B: RB.result_count})
    script = Counting({
        task.goal: [_cell(f"print(await launch_subagent({{{A!r}: {RA.result_count}}}))"), _cell("finish('root done')")],
        f"Craft the following items: {RA.result_count}x {A}": [_cell("print(view_inventory())")],
    })
    tree = _run(task, script)
    child = tree.children(tree.root_id)[0]
    assert is_loop_stop(child.finish_message) and len(child.steps) == 5  # as the reference counts it
    assert tree.root.steps[0].observation.startswith(f"[Cell 0 Output]\n{FINISH_MESSAGE}\n\nBudget used by subagent: 5/20")


def test_the_policy_steps_of_a_looping_agent_are_trained_and_the_forced_finish_is_not():
    task = _task({A: RA.result_count})
    tokenizer = tiny_tokenizer()
    reply = _cell("print(view_inventory())")
    policy = TokenizingPolicy(Counting({task.goal: [reply]}), tokenizer)
    tree = _run(task, policy)
    root = tree.root
    assert len(root.steps) == 5 and is_loop_stop(root.finish_message) and root.steps[-1].forced
    datums = execution_datums(root, 1.0, trajectory_id="t/n0")
    trained = [t for d in datums for t, m in zip(d.tokens, d.mask) if m]
    assert trained == [t for s in root.steps[:-1] for t in s.completion_token_ids]
    text = tokenizer.decode(trained)
    assert FINISH_MESSAGE not in text and "Loop detector" not in text
