"""The recursive agent runtime: policy protocol, budgets, agent loop, rollout trees."""

from sera.runtime.agent_env import AgentEnv, Outcome, Verdict
from sera.runtime.config import RuntimeConfig
from sera.runtime.policy import Completion, Policy, SamplingParams
from sera.runtime.delegation import ChildResult, DelegationError, NodeHandle
from sera.runtime.rollout import Rollout, run_rollout

__all__ = [
    "AgentEnv", "ChildResult", "Completion", "DelegationError", "NodeHandle", "Outcome", "Policy",
    "Rollout", "RuntimeConfig", "SamplingParams", "Verdict", "run_rollout",
]
