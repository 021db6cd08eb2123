"""Shared helpers of the evaluation tests: a few TextCraft tasks and scripted policies."""

from __future__ import annotations

import pytest

from sera.envs.registry import get_env
from sera.envs.textcraft.tasks import load_split
from sera.runtime.policy import Completion, SamplingParams
from sera.types import Message


class ScriptedPolicy:
    """Replies `text` to every call and records the sampling seeds it was called with."""

    def __init__(self, text: str = "no code here") -> None:
        self.text = text
        self.calls = 0
        self.seeds: list[int | None] = []

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        self.calls += 1
        self.seeds.append(sampling.seed)
        return Completion(text=self.text)


@pytest.fixture
def textcraft():
    return get_env("textcraft-synth")


@pytest.fixture
def val_tasks():
    return load_split("val")[:2]


@pytest.fixture
def scripted():
    """The `ScriptedPolicy` class (tests make one with the reply they need)."""
    return ScriptedPolicy
