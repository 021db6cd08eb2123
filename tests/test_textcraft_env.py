"""TextCraft-Synth agents through the full runtime and sandbox, driven by scripted replies."""

import asyncio

from sera.envs.textcraft.env import root_env_factory
from sera.envs.textcraft.prompts import goal_text
from sera.envs.textcraft.recipes import default_recipe_book
from sera.runtime import Completion, RuntimeConfig, SamplingParams, run_rollout
from sera.types import Message, Task

BOOK = default_recipe_book()
A, B = [i for i in BOOK.items_at_tier(1) if BOOK.recipes_for(i)[0].result_count > 1][:2]
RA, RB = BOOK.recipes_for(A)[0], BOOK.recipes_for(B)[0]


def _task(targets: dict[str, int]) -> Task:
    inventory: dict[str, int] = {}
    for recipe in (RA, RB):
        for name, qty in recipe.ingredients.items():
            inventory[name] = inventory.get(name, 0) + qty * 4
    return Task(id="unit.0", goal=goal_text(targets), env="textcraft-synth",
                misc={"target_items": targets, "initial_inventory": inventory})


def _cell(code: str) -> str:
    return f"<thought>step</thought>\n<python>\n{code}\n</python>"


def _craft_code(item: str, recipe) -> str:
    return f"print(craft({dict(recipe.ingredients)!r}, ({item!r}, {recipe.result_count})))"


class Script:
    """Replies keyed by the first goal line; records how many agents were waiting at once."""

    def __init__(self, replies: dict[str, list[str]], slow: float = 0.0) -> None:
        self.replies = replies
        self.slow = slow
        self.active = self.peak = 0

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        goal = messages[1].content.split("Your Goal: ")[1].splitlines()[0]
        turn = sum(m.role == "assistant" for m in messages)
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(self.slow)
        self.active -= 1
        replies = self.replies[goal]
        return Completion(text=replies[min(turn, len(replies) - 1)])


def _run(task: Task, script: Script, config: RuntimeConfig | None = None):
    return asyncio.run(run_rollout(task, script, root_env_factory(task, BOOK), config))


def test_parallel_children_share_the_live_inventory_and_are_verified():
    task = _task({A: RA.result_count, B: RB.result_count})
    root_goal = task.goal
    script = Script({
        root_goal: [
            _cell(f"r = await asyncio.gather(launch_subagent({{{A!r}: {RA.result_count}}}), "
                  f"launch_subagent({{{B!r}: {RB.result_count}}}, context='for the root'))\nprint(r[0])\nprint(view_inventory())"),
            _cell("finish('both ingredients crafted by my children')"),
        ],
        goal_text({A: RA.result_count}): [_cell(_craft_code(A, RA)), _cell("finish('made A')")],
        goal_text({B: RB.result_count}): [_cell(_craft_code(B, RB)), _cell("finish('made B')")],
    }, slow=0.05)
    tree = _run(task, script)
    assert tree.root_success is True
    kids = tree.children(tree.root_id)
    assert len(kids) == 2 and all(k.verified_success for k in kids)
    assert "Context provided from parent agent: for the root" in kids[1].goal
    assert script.peak == 2, "the two launches did not run concurrently"
    first = tree.root.steps[0]
    assert first.child_ids == [k.id for k in kids]
    assert "made A\n\nBudget used by subagent: 2/20 steps. Total remaining budget for the current task is 19 steps." in first.observation
    assert f"'{A}': {RA.result_count}" in first.observation, "the parent sees the children's crafts"
    assert tree.counters["tool_calls"] >= 5


def test_launch_at_the_maximum_depth_returns_a_clear_message():
    task = _task({A: RA.result_count})
    script = Script({task.goal: [_cell(f"print(await launch_subagent({{{A!r}: 1}}))"), _cell(_craft_code(A, RA)), _cell("finish('ok')")]})
    tree = _run(task, script, RuntimeConfig(max_depth=0))
    assert len(tree.nodes) == 1
    assert "you are at delegation depth 0, the maximum (0); no subagent was launched" in tree.root.steps[0].observation
    assert "you cannot launch subagents" in tree.root.messages[1].content
    assert tree.root_success is True


def test_bad_model_output_gets_precise_messages_and_the_agent_goes_on():
    task = _task({A: RA.result_count})
    script = Script({task.goal: [
        "I think I should craft.",
        _cell("x = (1,"),
        _cell("launch_subagent({'x': 1})"),
        _cell("print(await launch_subagent({'no_such_item': 1}))"),
        _cell("print(await launch_subagent('m0_i1'))"),
        _cell("print(craft('m0_ore', 3))"),
        _cell("print(undefined_name)"),
        _cell(_craft_code(A, RA)),
        _cell("finish('done')"),
    ]})
    tree = _run(task, script)
    obs = [s.observation for s in tree.root.steps]
    assert "no <python>...</python> block" in obs[0]
    assert "line 1" in obs[1] and "Error:" in obs[1]
    assert "must be awaited" in obs[2]
    assert "Error: launch_subagent: unknown item 'no_such_item'" in obs[3]
    assert "targets must be a non-empty dict" in obs[4]
    assert "ingredients must be a dict" in obs[5]
    assert "NameError" in obs[6]
    assert tree.root_success is True and len(tree.nodes) == 1


def test_an_agent_that_never_finishes_fails_verification():
    task = _task({A: RA.result_count})
    script = Script({task.goal: [_cell(_craft_code(A, RA)), _cell("print('thinking')")]})
    tree = _run(task, script, RuntimeConfig(max_calls_per_agent=3))
    assert tree.root_success is False and "exhausted the budget of 3" in tree.root.error
    assert tree.root.verifier_info["missing_items"] == {}, "crafted, but never finished"
