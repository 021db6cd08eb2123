"""The recursive agent runtime: the policy protocol, budgets and bounds, the launch seam
(`delegation`: handles, child requests, launchers), the agent loop and rollout trees."""

from sera.runtime.agent_env import AgentEnv, ForcedStep, Outcome, Verdict
from sera.runtime.config import RuntimeConfig
from sera.runtime.policy import Completion, Policy, SamplingParams
from sera.runtime.delegation import ChildRequest, ChildResult, DelegationError, Launcher, NodeHandle, PlainLauncher
from sera.runtime.rollout import Rollout, run_rollout

__all__ = [
    "AgentEnv", "ChildRequest", "ForcedStep", "ChildResult", "Completion", "DelegationError", "Launcher", "NodeHandle",
    "Outcome", "PlainLauncher", "Policy", "Rollout", "RuntimeConfig", "SamplingParams", "Verdict", "run_rollout",
]
