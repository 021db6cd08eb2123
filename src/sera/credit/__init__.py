"""Credit assignment: pure functions of recorded rollout trees and labels, one rule per module.

- `leaf`: leaf-coverage credit for delegation events (§6.1/6.2), on the live tree
  (`RolloutTree.live_nodes`: uncommitted counterfactual branches removed).
- `ranking`: rubric-writer rewards from scored, labelled fork branches (§5.2, §5.5).
- `baselines`: leave-one-out baselines (§5.2, §6.2, §7.2).
- `depth`: depth inverse-frequency weights (§7.3).
- `rao`: RAO execution reward per node (§6.3).
- `execution`: every agent's execution reward in one tree: RAO labels or SERA rubric scores.
"""

from sera.credit.baselines import (
    execution_advantage,
    execution_baselines,
    loo_advantages,
    root_balanced_loo,
)
from sera.credit.depth import depth_weights
from sera.credit.execution import TreeRewards, execution_rewards
from sera.credit.leaf import EventKey, leaf_coverage, leaf_rewards
from sera.credit.ranking import (
    RankingDiagnostics,
    rank_dispersion_reward,
    ranking_diagnostics,
    ranking_reward,
)
from sera.credit.rao import rao_reward

__all__ = [
    "EventKey",
    "TreeRewards",
    "RankingDiagnostics",
    "depth_weights",
    "execution_advantage",
    "execution_baselines",
    "execution_rewards",
    "leaf_coverage",
    "leaf_rewards",
    "loo_advantages",
    "rank_dispersion_reward",
    "ranking_diagnostics",
    "ranking_reward",
    "rao_reward",
    "root_balanced_loo",
]
