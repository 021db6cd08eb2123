"""The short TextCraft-Synth expert (`sft.expert: short`): three short regular replies, no
delegation, every quantity printed by the plan cell; it solves starter and easy tasks."""

from __future__ import annotations

import asyncio

import pytest

from sera.envs.registry import get_env
from sera.envs.textcraft.short_expert import CRAFT_CALL, TextCraftShortExpert
from sera.envs.textcraft.starter import starter_tasks
from sera.envs.textcraft.tasks import load_split
from sera.eval.harness import evaluate
from sera.eval.store import tree_path
from sera.train.config import ConfigError, load_config
from sera.types import Message, RolloutTree


def test_it_solves_starter_and_easy_tasks_in_three_short_replies(tmp_path) -> None:
    spec = get_env("textcraft-synth")
    tasks = starter_tasks("starter-val")[:6] + [t for t in load_split("val") if t.difficulty == "easy"][:6]
    summary = asyncio.run(evaluate(tasks, TextCraftShortExpert(), spec.root_env, tmp_path, env_name=spec.name,
                                   split="mixed", policy_name="short", concurrency=6))
    assert summary.overall.successes == len(tasks), summary.failed
    for task in tasks:
        tree = RolloutTree.from_json(tree_path(tmp_path, task.id).read_text())
        assert len(tree.nodes) == 1, "it never delegates"
        plan, craft, finish = (s.completion_text for s in tree.nodes[tree.root_id].steps)
        printed = [line for line in tree.nodes[tree.root_id].steps[0].observation.splitlines() if line.startswith(CRAFT_CALL)]
        assert craft.splitlines()[2:-1] == printed, "the craft reply is the printed lines, copied"
        assert "finish(" in finish and len(plan) < 700


def test_the_plan_template_differs_between_tasks_only_in_its_first_line() -> None:
    expert = TextCraftShortExpert()
    replies = [expert.reply([Message(role="system", content=""), Message(role="user", content=t.goal)])
               for t in starter_tasks("starter-train")[:5]]
    bodies = {tuple(r.splitlines()[3:]) for r in replies}
    assert len(bodies) == 1 and all(r.splitlines()[2].startswith("want = {") for r in replies)


def test_sft_expert_is_a_named_config_value() -> None:
    assert load_config("configs/main/textcraft-cpu.yaml", overrides=["sft.expert=short"]).sft.expert == "short"
    with pytest.raises(ConfigError, match="sft.expert='long'.*'default', 'short'"):
        load_config("configs/main/textcraft-cpu.yaml", overrides=["sft.expert=long"])
