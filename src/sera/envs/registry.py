"""Environments by name, each with every fact the rest of sera needs about it: its tasks, the
root agent's environment, the scripted expert, evaluation sampling, the reply protocol, the
settings credit needs, and its fixed rubric for the global-rubric ablation.

Environment modules are imported only when their entry is asked for. An environment outside
this registry is named by its import path, `package.module:attribute`, where the attribute is
an `EnvSpec` or a function returning one (a user's own world, or the test kit's letters world).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sera.agents.protocol import CODEACT, TEXT, ReplyProtocol
from sera.runtime.delegation import EnvFactory
from sera.runtime.policy import Policy, SamplingParams
from sera.types import Task

if TYPE_CHECKING:
    from sera.rubric import Rubric


@dataclass(frozen=True)
class EnvTraining:
    """What credit needs to know about an environment."""

    protocol: ReplyProtocol
    """The reply protocol: where launch spans are, what a launch attempt is."""
    label_source: Literal["verifier", "judge"]
    """Children's labels (RAO rewards, counterfactual branches): the programmatic verifier or an
    external judge."""
    filter_zero_variance: bool
    """Drop a task's datums when all their advantages are equal (TextCraft) or keep them (TextWorld)."""
    drop_error_steps: bool
    """In a successful trajectory, leave steps that raised an error untrained (TextCraft)."""
    score_max_tokens_rt: int
    """Scorer completion cap in rubric training (1,024 TextCraft, 512 TextWorld)."""


@dataclass(frozen=True)
class EnvSpec:
    """One environment: how to get its tasks, environments and scripted expert, and its facts."""

    name: str
    """Registry name."""
    splits: tuple[str, ...]
    """Published splits."""
    load_split: Callable[..., list[Task]]
    """Tasks of a named split: `load_split(split, rules=None)`."""
    load_file: Callable[..., list[Task]]
    """Tasks from a file in the environment's published format: `load_file(path, rules=None)`."""
    root_env: Callable[[Task], EnvFactory]
    """The root agent's environment for a task."""
    oracle: Callable[[list[Task]], Policy]
    """The scripted expert policy for the given tasks (an oracle may know its tasks)."""
    sampling: SamplingParams
    """Evaluation sampling of model policies (the paper's settings: greedy, caps, stops)."""
    training: EnvTraining
    """What credit needs to know (labels, filters, the reply protocol)."""
    experts: Mapping[str, Callable[[list[Task]], Policy]] = field(default_factory=dict)
    """Other scripted experts SFT may demonstrate with, by name (`sft.expert`); `oracle` is `default`."""
    global_rubric: Callable[[], Rubric] | None = None
    """The fixed rubric of the global-rubric ablation; None where the paper has none."""
    rules: tuple[str, ...] = ()
    """Rules profiles the loaders accept as `rules=` (TextWorld-Sync: `sync`, `reference`);
    empty: the environment has one set of rules and refuses any `rules=` but None."""

    @property
    def protocol(self) -> ReplyProtocol:
        """How the environment's agents write replies."""
        return self.training.protocol


class RulesNotSupportedError(ValueError):
    """A rules profile was asked of an environment that has none."""


def _no_rules(name: str, load: Callable[[Any], list[Task]]) -> Callable[..., list[Task]]:
    """`load` taking `rules=` as the registry's loaders do, refusing any value but None."""

    def loader(source: Any, rules: str | None = None) -> list[Task]:
        if rules is not None:
            raise RulesNotSupportedError(f"{name} has no rules profiles; --rules {rules} applies to textworld-sync only")
        return load(source)

    return loader


def _textcraft() -> EnvSpec:
    from sera.envs.textcraft.env import root_env_factory
    from sera.envs.textcraft.oracle import TextCraftOracle
    from sera.envs.textcraft.recipes import default_recipe_book
    from sera.envs.textcraft.short_expert import TextCraftShortExpert
    from sera.envs.textcraft.tasks import load_split, load_tasks

    def global_rubric() -> Rubric:
        from sera.envs.textcraft.global_rubric import GLOBAL_TEXTCRAFT_RUBRIC

        return GLOBAL_TEXTCRAFT_RUBRIC

    return EnvSpec(
        name="textcraft-synth",
        splits=("train", "val", "starter-train", "starter-val"),  # starter: the CPU curriculum tier
        load_split=_no_rules("textcraft-synth", load_split),
        load_file=_no_rules("textcraft-synth", load_tasks),
        root_env=lambda task: root_env_factory(task, default_recipe_book()),
        oracle=lambda tasks: TextCraftOracle(),
        experts={"short": lambda tasks: TextCraftShortExpert()},
        sampling=SamplingParams(temperature=0.0, max_tokens=512, stop=CODEACT.stops, max_prompt_tokens=9728),
        training=EnvTraining(CODEACT, "verifier", filter_zero_variance=True, drop_error_steps=True, score_max_tokens_rt=1024),
        global_rubric=global_rubric,
    )


def _textworld() -> EnvSpec:
    from sera.envs.textworld.env import root_env_factory
    from sera.envs.textworld.oracle import TextWorldOracle
    from sera.envs.textworld.rules import RULES
    from sera.envs.textworld.tasks import load_split, load_tasks

    return EnvSpec(
        name="textworld-sync",
        splits=("train", "dev", "test"),
        load_split=load_split,
        load_file=load_tasks,
        root_env=root_env_factory,
        oracle=TextWorldOracle,
        # Stopping on a closing tag saves tokens; the parser accepts the unclosed final block.
        sampling=SamplingParams(temperature=0.0, max_tokens=3072, stop=TEXT.stops, max_prompt_tokens=10240),
        training=EnvTraining(TEXT, "judge", filter_zero_variance=False, drop_error_steps=False, score_max_tokens_rt=512),
        rules=RULES,
    )


_REGISTRY: dict[str, Callable[[], EnvSpec]] = {"textcraft-synth": _textcraft, "textworld-sync": _textworld}


def env_names() -> list[str]:
    """Known environment names."""
    return sorted(_REGISTRY)


def get_env(name: str) -> EnvSpec:
    """The spec of a named environment, or of one named `module:attribute`; a clear error lists
    the known names."""
    if name in _REGISTRY:
        return _REGISTRY[name]()
    if ":" in name:
        return _import_env(name)
    raise KeyError(f"unknown environment {name!r}; known: {', '.join(env_names())}, or module:attribute of an EnvSpec")


def _import_env(path: str) -> EnvSpec:
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise KeyError(f"environment {path!r}: cannot import {module_name!r} ({error})") from None
    entry = getattr(module, attribute, None)
    if entry is None:
        raise KeyError(f"environment {path!r}: {module_name} has no attribute {attribute!r}")
    spec = entry() if callable(entry) and not isinstance(entry, EnvSpec) else entry
    if not isinstance(spec, EnvSpec):
        raise KeyError(f"environment {path!r}: {attribute} is a {type(spec).__name__}, not an EnvSpec")
    return spec
