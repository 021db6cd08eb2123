"""The recursive runtime: one root agent, children launched by agents, all recorded as one tree.

Each agent runs the loop in `_run_agent`: call the policy with the agent's messages, parse the
reply, execute it in the agent's environment, append the observation; stop on `finish`, on the
agent's own budget of policy calls, or on an error. Children do not consume their parent's
budget. Children launched together run concurrently as separate asyncio tasks, and whatever goes
wrong inside one (policy failure, timeout, crash, cancellation) is recorded on that node only.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from sera.runtime.agent_env import AgentEnv
from sera.runtime.config import RuntimeConfig
from sera.runtime.delegation import ChildRequest, Delegator, ForkPoint, PlainDelegator
from sera.runtime.policy import Policy
from sera.types import AgentNode, ForkGroup, Message, RolloutTree, Step, Task

EnvFactory = Callable[["NodeHandle"], AgentEnv]
"""Builds the environment of a new agent from its handle."""


class DelegationError(RuntimeError):
    """A launch the runtime refuses (e.g. beyond the maximum depth)."""


@dataclass(frozen=True)
class ChildResult:
    """What a parent learns when a child it launched has ended."""

    node_id: str
    """The child's node id."""
    finish_message: str | None
    """The child's finish message, if it finished."""
    error: str | None
    """Why the child stopped without finishing, if it did."""
    steps_used: int
    """Policy calls the child made."""
    budget: int
    """The child's budget of policy calls."""
    verified_success: bool | None
    """Programmatic check of the child's goal, when the environment has one."""
    final_observation: str = ""
    """The last observation the child received."""


class NodeHandle:
    """An agent's link to the runtime: its record, its budget, and how it launches children."""

    def __init__(self, rollout: Rollout, node: AgentNode) -> None:
        self._rollout = rollout
        self.node = node

    @property
    def depth(self) -> int:
        return self.node.depth

    @property
    def can_delegate(self) -> bool:
        """False at the maximum depth."""
        return self.node.depth < self._rollout.config.max_depth

    @property
    def max_depth(self) -> int:
        return self._rollout.config.max_depth

    @property
    def remaining_calls(self) -> int:
        """Policy calls this agent has left (the step being executed counts as used)."""
        return self.node.budget - self._rollout.calls_made(self.node.id)

    def count(self, name: str, n: int = 1) -> None:
        """Add to one of the rollout's usage counters (tool calls, world clones, ...)."""
        self._rollout.count(name, n)

    @property
    def pending_reply(self) -> str:
        """The reply this agent's current step is executing (the delegating completion)."""
        return self._rollout.pending_reply(self.node.id)

    async def launch(
        self, goal: str, make_env: EnvFactory, budget: int | None = None, *, fork: ForkPoint | None = None
    ) -> ChildResult:
        """Run a child agent on `goal` to completion; concurrent launches run concurrently.

        `budget` (policy calls) is capped at the runtime's `max_calls_per_agent`. `fork` lets a
        training strategy run the child on copies of the world; without it the child always runs
        on the shared world. Which strategy runs is the rollout's `Delegator`'s business.
        """
        return await self._rollout.launch_child(self, ChildRequest(goal, make_env, budget, fork))


class Rollout:
    """Runs one root rollout of a task and records the tree."""

    def __init__(
        self,
        task: Task,
        policy: Policy,
        config: RuntimeConfig | None = None,
        *,
        seed: int | None = None,
        policy_version: int = 0,
        delegator: Delegator | None = None,
    ) -> None:
        self.task = task
        self.policy = policy
        self.config = config or RuntimeConfig()
        self.seed = seed
        self.policy_version = policy_version
        self.delegator: Delegator = delegator or PlainDelegator()
        bind = getattr(self.delegator, "bind", None)
        if bind is not None:  # strategies with per-rollout state refuse a second rollout here
            bind(self)
        self.fork_groups: list[ForkGroup] = []
        self._nodes: dict[str, AgentNode] = {}
        self._pending_children: dict[str, list[str]] = {}
        self._pending_replies: dict[str, str] = {}
        self._calls: dict[str, int] = {}
        self._counters: dict[str, int] = {}

    # -- bookkeeping ---------------------------------------------------------------------------

    def count(self, name: str, n: int = 1) -> None:
        self._counters[name] = self._counters.get(name, 0) + n

    def calls_made(self, node_id: str) -> int:
        return self._calls.get(node_id, 0)

    def pending_reply(self, node_id: str) -> str:
        return self._pending_replies.get(node_id, "")

    def node(self, node_id: str) -> AgentNode:
        """A node of the tree being built."""
        return self._nodes[node_id]

    def _new_node(self, goal: str, parent: AgentNode | None, budget: int | None = None) -> AgentNode:
        node = AgentNode(
            id=f"n{len(self._nodes)}",
            parent_id=parent.id if parent else None,
            fork_step=len(parent.steps) if parent else None,
            depth=parent.depth + 1 if parent else 0,
            goal=goal,
            budget=self.config.child_budget(budget),
        )
        self._nodes[node.id] = node
        self.count("agents")
        return node

    # -- running -------------------------------------------------------------------------------

    async def run(self, make_root_env: EnvFactory) -> RolloutTree:
        """Run the root agent (and through it every child) and return the finished tree."""
        started = time.time()
        root = self._new_node(self.task.goal, None)
        error = None
        try:
            await asyncio.wait_for(
                self._run_agent(root, make_root_env), timeout=self.config.rollout_timeout_s
            )
        except TimeoutError:
            error = f"rollout timed out after {self.config.rollout_timeout_s:g} s"
        try:  # pending training work (rubric scores, labels): at most two policy calls deep
            await asyncio.wait_for(self.delegator.finalize(self), timeout=2 * self.config.policy_timeout_s)
        except TimeoutError:
            error = error or f"finishing the launcher's pending work timed out after {2 * self.config.policy_timeout_s:g} s"
        return RolloutTree(
            task_id=self.task.id,
            env=self.task.env,
            root_id=root.id,
            nodes=self._nodes,
            seed=self.seed,
            policy_version=self.policy_version,
            fork_groups=self.fork_groups,
            root_success=root.verified_success,
            error=error,
            started_at=started,
            wall_time_s=time.time() - started,
            counters=dict(self._counters),
        )

    async def launch_child(self, parent: NodeHandle, request: ChildRequest) -> ChildResult:
        """Check the depth, then let the delegation strategy run the child."""
        if not parent.can_delegate:
            raise DelegationError(
                f"cannot launch a subagent from depth {parent.depth}: the maximum delegation "
                f"depth is {self.config.max_depth}; perform the task yourself"
            )
        return await self.delegator.delegate(self, parent, request)

    async def run_child(
        self,
        parent: NodeHandle,
        goal: str,
        make_env: EnvFactory,
        budget: int | None = None,
        *,
        branch: tuple[str, int] | None = None,
    ) -> ChildResult:
        """Create a child node of `parent` and run it to completion (strategies call this).

        `branch` = (fork group id, branch index) marks a counterfactual branch.
        """
        child = self._new_node(goal, parent.node, budget)
        if branch is not None:
            child.fork_group_id, child.branch_index = branch
        self._pending_children.setdefault(parent.node.id, []).append(child.id)
        # A task of its own: the child's failures and cancellation stay in the child's record.
        await asyncio.create_task(self._run_agent(child, make_env))
        return ChildResult(
            node_id=child.id,
            finish_message=child.finish_message,
            error=child.error,
            steps_used=len(child.steps),
            budget=child.budget,
            verified_success=child.verified_success,
            final_observation=child.steps[-1].observation if child.steps else "",
        )

    async def _run_agent(self, node: AgentNode, make_env: EnvFactory) -> None:
        node.started_at = time.time()
        env: AgentEnv | None = None
        try:
            env = make_env(NodeHandle(self, node))
            node.messages = list(env.initial_messages())
            await self._agent_loop(node, env)
        except asyncio.CancelledError:
            node.error = node.error or "cancelled before finishing"
            raise
        except Exception as exc:  # a bug or broken environment: recorded on this node only
            node.error = f"agent crashed: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
        finally:
            if env is not None:
                verdict = env.verify(node.finish_message)
                node.verified_success = verdict.success
                node.verifier_info = verdict.info
                observe = getattr(env, "observable_state", None)
                node.final_state = observe() if observe is not None else {}
                await asyncio.shield(env.close())
            node.ended_at = time.time()

    async def _agent_loop(self, node: AgentNode, env: AgentEnv) -> None:
        while self.calls_made(node.id) < node.budget:
            prompt_len = len(node.messages)
            started = time.time()
            self._calls[node.id] = self.calls_made(node.id) + 1
            self.count("policy_calls")
            t0 = time.perf_counter()
            try:
                completion = await asyncio.wait_for(
                    self.policy(list(node.messages), self.config.sampling),
                    timeout=self.config.policy_timeout_s,
                )
            except TimeoutError:
                node.error = f"policy call timed out after {self.config.policy_timeout_s:g} s"
                return
            except Exception as exc:
                node.error = f"policy call failed: {type(exc).__name__}: {exc}"
                return
            policy_s = time.perf_counter() - t0
            self.count("prompt_tokens", completion.usage.prompt_tokens)
            self.count("completion_tokens", completion.usage.completion_tokens)

            action = env.parse(completion.text)
            t1 = time.perf_counter()
            self._pending_replies[node.id] = completion.text
            try:
                outcome = await env.execute(action)
            finally:
                self._pending_replies.pop(node.id, None)
            node.steps.append(
                Step(
                    index=len(node.steps),
                    prompt_len=prompt_len,
                    prompt_messages=completion.prompt_messages,
                    prompt_token_ids=completion.prompt_token_ids,
                    completion_text=completion.text,
                    completion_token_ids=completion.token_ids,
                    completion_logprobs=completion.logprobs,
                    finish_reason=completion.finish_reason,
                    usage=completion.usage,
                    action=action,
                    observation=outcome.observation,
                    error=outcome.error,
                    child_ids=self._pending_children.pop(node.id, []),
                    started_at=started,
                    policy_s=policy_s,
                    env_s=time.perf_counter() - t1,
                )
            )
            node.messages.append(Message(role="assistant", content=completion.text))
            node.messages.append(Message(role="user", content=outcome.observation))
            if outcome.finished:
                node.finish_message = outcome.finish_message
                return
        node.error = (
            f"exhausted the budget of {node.budget} policy calls before finishing; "
            "the task may be incomplete"
        )


async def run_rollout(
    task: Task,
    policy: Policy,
    make_root_env: EnvFactory,
    config: RuntimeConfig | None = None,
    *,
    seed: int | None = None,
    policy_version: int = 0,
    delegator: Delegator | None = None,
) -> RolloutTree:
    """Run one root rollout of `task` and return its tree (`delegator`: how children run)."""
    rollout = Rollout(task, policy, config, seed=seed, policy_version=policy_version, delegator=delegator)
    return await rollout.run(make_root_env)
