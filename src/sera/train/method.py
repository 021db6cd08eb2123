"""Training methods as named presets: RAO, SERA, their ablations (sera-spec §6.3, §7.6, §4.5, §5.5).

A `Method` says how each node is credited and which stages alternate; what depends on the
environment (where labels come from, the reply protocol, zero-variance filtering) is the
environment's own (`sera.envs.registry.EnvTraining`). Presets follow the paper's recipes; every field can be overridden by name, and an
unknown name or value is an error that lists the allowed ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal, get_args, get_origin, get_type_hints

from sera.train.schedule import StageSchedule

ExecutionCredit = Literal["rao", "rubric"]
RubricSource = Literal["policy", "external", "global"]
ScorerSource = Literal["policy", "external"]
RubricReward = Literal["ranking", "rank_dispersion"]
FailurePolicy = Literal["drop", "binary", "skip_rollout"]
LossName = Literal["cispo", "ppo_clip", "pg"]
LaunchEvents = Literal["reference", "all"]


@dataclass(frozen=True)
class Method:
    """One training method: credit rules, stage schedule and their settings."""

    name: str
    """Preset name (or a user's own)."""
    execution_credit: ExecutionCredit
    """Children's execution reward: `rao` (verified or judged success) or `rubric` (the parent's
    frozen rubric scored by the policy). The root is always rewarded by verified task success."""
    schedule: str
    """Stage schedule keyed on the policy version, e.g. `execution:16,delegation:2,rubric_generation:2`."""
    rubric_writer: RubricSource = "policy"
    """Who writes rubrics: the policy (SERA), an external model, or one fixed global rubric."""
    rubric_scorer: ScorerSource = "policy"
    """Who scores a child with its rubric."""
    rubric_reward: RubricReward = "ranking"
    """Rubric-training group reward: margin ranking (§5.2) or rank + dispersion (§5.5)."""
    score_mode: Literal["gated", "model_final"] = "gated"
    """`gated`: 1[success]·Σ wᵢsᵢ from the criterion scores (the paper); `model_final`: the
    scorer's own final number (the reference code, §11.1 item 4)."""
    rubric_limits: Literal["strict", "reference"] = "strict"
    """`strict`: 4-8 criteria, weights summing to 1; `reference`: >= 2 criteria, renormalised."""
    failure_policy: FailurePolicy = "drop"
    """A child whose rubric or score is invalid: `drop` it from the gradient, fall back to its
    `binary` label, or `skip_rollout` (drop the whole tree)."""
    rao_lambda: float = 0.0
    """RAO's bonus weight on the mean success of a node's direct children (0 in the paper)."""
    branches: int = 8
    """Counterfactual children per group in rubric training."""
    max_fork_envs: int = 16
    """World copies per root rollout in rubric training (the root's world counts 1)."""
    margin: float = 0.2
    """Ranking margin."""
    loss: LossName = "cispo"
    """Policy loss."""
    depth_weighting: bool = True
    """Depth inverse-frequency weights over each batch (§7.3)."""
    launch_events: LaunchEvents = "reference"
    """Which delegation events enter a rollout's mean in the root-balanced LOO: `reference`
    only those with a trainable launch span (the reference code); `all` every launch and launch
    attempt, trained or not (our earlier rule). See docs/credit.md, "Launch events"."""

    def __post_init__(self) -> None:
        hints = get_type_hints(type(self))
        for f in fields(self):
            allowed = get_args(hints[f.name]) if get_origin(hints[f.name]) is Literal else ()
            value = getattr(self, f.name)
            if allowed and value not in allowed:
                raise ValueError(f"method {self.name!r}: {f.name} must be one of {list(allowed)}, got {value!r}")
        StageSchedule.parse(self.schedule)  # raises naming the bad part
        if self.branches < 2:
            raise ValueError(f"method {self.name!r}: branches must be >= 2, got {self.branches}")
        if self.max_fork_envs < 1 or self.margin < 0 or self.rao_lambda < 0:
            raise ValueError(f"method {self.name!r}: max_fork_envs >= 1, margin >= 0 and rao_lambda >= 0 are required")

    @property
    def stage_schedule(self) -> StageSchedule:
        return StageSchedule.parse(self.schedule)

    def with_overrides(self, **overrides: Any) -> Method:
        """A copy with some fields changed; unknown field names are an error."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown method setting(s) {unknown}; known: {sorted(known)}")
        return replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("rao", "rao", "execution:1"),
        Method("rao+d", "rao", "execution:12,delegation:4"),
        Method("rao+rt", "rao", "execution:16,rubric_generation:2"),
        Method("sera-no-d-rt", "rubric", "execution:1"),
        Method("sera-no-d", "rubric", "execution:16,rubric_generation:2"),
        Method("sera", "rubric", "execution:16,delegation:2,rubric_generation:2"),
        # Ablations (TextCraft in the paper): where the rubric comes from and how it is rewarded.
        Method("sera-global-rubric", "rubric", "execution:1", rubric_writer="global"),
        Method("sera-external-rubric", "rubric", "execution:1", rubric_writer="external"),
        Method("sera-external-rubric-scorer", "rubric", "execution:1", rubric_writer="external", rubric_scorer="external"),
        Method("sera-rank-disc", "rubric", "execution:16,delegation:2,rubric_generation:2", rubric_reward="rank_dispersion"),
    )
}
"""The paper's recipes (sera-spec §7.6 table) and ablations, by name."""


def get_method(name: str, **overrides: Any) -> Method:
    """A preset by name, with optional overrides."""
    if name not in PRESETS:
        raise ValueError(f"unknown method {name!r}; presets: {sorted(PRESETS)}")
    return PRESETS[name].with_overrides(**overrides) if overrides else PRESETS[name]
