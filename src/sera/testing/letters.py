"""A one-turn world that the tiny random model can learn: "write a reply containing the letter X".

The trainer's learning test needs a reward that a random 2-layer model reaches often enough to
give mixed groups (about half its temperature-1 replies of 8 tokens contain a given common
letter) and that a working RL loop measurably raises within a few steps. A sign error, a
masking bug or a wrong advantage makes the success rate fall or stay flat instead.

Each agent makes exactly one call: its reply ends the episode and is its finish message; the
goal is verified by a substring check, so the labels are exact. Nothing here delegates, so the
world suits the execution stage (RAO's binary reward, LOO baseline across the K trees).

The world is registered under its import path: `environment.name: sera.testing.letters:spec`
(`sera.envs.registry.get_env` imports `module:attribute` names).
"""

from __future__ import annotations

from typing import Any

from sera.agents.protocol import TEXT
from sera.envs.registry import EnvSpec, EnvTraining
from sera.runtime.agent_env import Outcome, Verdict
from sera.runtime.delegation import EnvFactory, NodeHandle
from sera.runtime.policy import Completion, SamplingParams
from sera.types import Action, Message, Task

NAME = "letters"
"""The environment's name in task records and summaries."""
LETTERS = "aeiotls"
"""Target letters: common in the tiny tokenizer's pieces, so no task is out of a random model's reach."""
PHRASINGS = (
    "Write a reply that contains the letter '{letter}'.",
    "Reply with any text that includes the letter '{letter}'.",
    "Your answer must contain the letter '{letter}' somewhere.",
)
"""Goal templates; several per letter so that a task is more than its letter."""
SPLIT_SIZES = {"train": 42, "val": 14}
"""Tasks per split (every letter under every phrasing, repeated)."""


def goal_letter(goal: str) -> str:
    """The letter a goal asks for (between the first pair of single quotes)."""
    return goal.split("'")[1]


def load_split(split: str, rules: str | None = None) -> list[Task]:
    """The tasks of `split`: letters and phrasings in a fixed rotation."""
    if rules is not None:
        raise ValueError(f"{NAME} has no rules profiles (got rules={rules!r})")
    if split not in SPLIT_SIZES:
        raise ValueError(f"{NAME} has splits {sorted(SPLIT_SIZES)}, not {split!r}")
    offset = 0 if split == "train" else 1  # val pairs letters with other phrasings than train
    tasks = []
    for i in range(SPLIT_SIZES[split]):
        letter = LETTERS[i % len(LETTERS)]
        phrasing = PHRASINGS[(i // len(LETTERS) + offset) % len(PHRASINGS)]
        tasks.append(Task(id=f"{NAME}.{split}.{i}", goal=phrasing.format(letter=letter), env=NAME, difficulty="easy"))
    return tasks


def load_file(path: Any, rules: str | None = None) -> list[Task]:
    """The letters world has no task files."""
    raise ValueError(f"{NAME} has no task files (got {path}); use split train or val")


class LettersEnv:
    """One agent: its first reply is its answer."""

    def __init__(self, handle: NodeHandle) -> None:
        self.handle = handle

    def initial_messages(self) -> list[Message]:
        return [Message(role="system", content="Answer the request in a few words."),
                Message(role="user", content=self.handle.node.goal)]

    def parse(self, reply: str) -> Action:
        return Action(kind="text", body=reply)

    async def execute(self, action: Action) -> Outcome:
        return Outcome(observation="", finished=True, finish_message=action.body)

    def forced_step(self) -> None:
        return None

    def verify(self, finish_message: str | None) -> Verdict:
        letter = goal_letter(self.handle.node.goal)
        return Verdict(success=letter in (finish_message or "").lower(), info={"letter": letter})

    def observable_state(self) -> dict[str, Any]:
        return {"goal": self.handle.node.goal}

    async def close(self) -> None:
        pass


def root_env(task: Task) -> EnvFactory:
    """Every agent of the world is a `LettersEnv`."""
    return LettersEnv


class LettersOracle:
    """The scripted expert: answers with the asked letter."""

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        return Completion(text=f"the letter {goal_letter(messages[-1].content)}")


def spec() -> EnvSpec:
    """The registry entry of the letters world."""
    return EnvSpec(
        name=NAME,
        splits=tuple(SPLIT_SIZES),
        load_split=load_split,
        load_file=load_file,
        root_env=root_env,
        oracle=lambda tasks: LettersOracle(),
        sampling=SamplingParams(temperature=0.0, max_tokens=8, stop=()),
        training=EnvTraining(TEXT, "verifier", filter_zero_variance=False, drop_error_steps=False, score_max_tokens_rt=32),
    )
