"""Environments the CLI and harness know by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sera.runtime.policy import Policy, SamplingParams
from sera.runtime.delegation import EnvFactory
from sera.types import Task


@dataclass(frozen=True)
class EnvSpec:
    """How to get tasks, environments and the scripted expert of one environment."""

    name: str
    """Registry name."""
    splits: tuple[str, ...]
    """Published splits."""
    load_split: Callable[[str], list[Task]]
    """Tasks of a named split."""
    load_file: Callable[[Path], list[Task]]
    """Tasks from a file in the environment's published format."""
    root_env: Callable[[Task], EnvFactory]
    """The root agent's environment for a task."""
    oracle: Callable[[list[Task]], Policy]
    """The scripted expert policy for the given tasks (an oracle may know its tasks)."""
    sampling: SamplingParams
    """Evaluation sampling of model policies (the paper's settings: greedy, caps, stops)."""


def _textcraft() -> EnvSpec:
    from sera.agents.codeact import STOP
    from sera.envs.textcraft.env import root_env_factory
    from sera.envs.textcraft.oracle import TextCraftOracle
    from sera.envs.textcraft.recipes import default_recipe_book
    from sera.envs.textcraft.tasks import load_split, load_tasks

    return EnvSpec(
        name="textcraft-synth",
        splits=("train", "val"),
        load_split=load_split,
        load_file=load_tasks,
        root_env=lambda task: root_env_factory(task, default_recipe_book()),
        oracle=lambda tasks: TextCraftOracle(),
        sampling=SamplingParams(temperature=0.0, max_tokens=512, stop=(STOP,), max_prompt_tokens=9728),
    )


def _textworld() -> EnvSpec:
    from sera.agents.text_protocol import STOPS
    from sera.envs.textworld.env import root_env_factory
    from sera.envs.textworld.oracle import TextWorldOracle
    from sera.envs.textworld.tasks import load_split, load_tasks

    return EnvSpec(
        name="textworld-sync",
        splits=("train", "dev", "test"),
        load_split=load_split,
        load_file=load_tasks,
        root_env=root_env_factory,
        oracle=TextWorldOracle,
        # Stopping on a closing tag saves tokens; the parser accepts the unclosed final block.
        sampling=SamplingParams(temperature=0.0, max_tokens=3072, stop=STOPS, max_prompt_tokens=10240),
    )


_REGISTRY: dict[str, Callable[[], EnvSpec]] = {"textcraft-synth": _textcraft, "textworld-sync": _textworld}


def env_names() -> list[str]:
    """Known environment names."""
    return sorted(_REGISTRY)


def get_env(name: str) -> EnvSpec:
    """The spec of a named environment; a clear error lists the known names."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown environment {name!r}; known: {', '.join(env_names())}")
    return _REGISTRY[name]()
