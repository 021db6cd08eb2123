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
from typing import Any

from sera.counters import Counter, check_counter
from sera.runtime.agent_env import AgentEnv
from sera.runtime.config import RuntimeConfig
from sera.runtime.delegation import (
    ChildRequest,
    ChildResult,
    DelegationError,
    EnvFactory,
    Launcher,
    NodeHandle,
    PlainLauncher,
)
from sera.runtime.policy import Policy, SamplingParams
from sera.types import AgentNode, ForkGroup, Message, RolloutTree, Step, Task


class Rollout:
    """Runs one root rollout of a task and records the tree.

    It is the `AgentRuntime` behind every agent's `NodeHandle` and the `ChildRunner` its
    launcher sees.
    """

    def __init__(
        self,
        task: Task,
        policy: Policy,
        config: RuntimeConfig | None = None,
        *,
        seed: int | None = None,
        policy_version: int = 0,
        launcher: Launcher | None = None,
    ) -> None:
        self.task = task
        self.policy = policy
        self.config = config or RuntimeConfig()
        self.seed = seed
        self.policy_version = policy_version
        self.launcher: Launcher = launcher or PlainLauncher()
        self._fork_groups: list[ForkGroup] = []
        self._nodes: dict[str, AgentNode] = {}
        self._launched: dict[str, list[str]] = {}
        self._calls: dict[str, int] = {}
        self._sampling: dict[str, SamplingParams] = {}  # agents that do not sample as the config says
        self._counters: dict[str, int] = {}
        self._chars = 0  # replies + observations so far (the tree-size bound)
        self._tasks: set[asyncio.Task[None]] = set()  # every agent's task, to cancel on timeout

    # -- the ports: bookkeeping for handles and launchers ----------------------------------------

    def count(self, name: Counter | str, n: int = 1) -> None:
        """Add `n` to a declared counter (`sera.counters.Counter`); an unknown name is an error."""
        key = check_counter(name).value
        self._counters[key] = self._counters.get(key, 0) + n

    def calls_made(self, node_id: str) -> int:
        return self._calls.get(node_id, 0)

    def node(self, node_id: str) -> AgentNode:
        """A node of the tree being built."""
        return self._nodes[node_id]

    def add_fork_group(self, group: ForkGroup) -> ForkGroup:
        """Record `group` on the tree under the next free id (`g0`, `g1`, ...)."""
        group.id = f"g{len(self._fork_groups)}"
        self._fork_groups.append(group)
        return group

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
        self.count(Counter.AGENTS)
        return node

    # -- running -------------------------------------------------------------------------------

    async def run(self, make_root_env: EnvFactory) -> RolloutTree:
        """Run the root agent (and through it every child) and return the finished tree."""
        started = time.time()
        root = self._new_node(self.task.goal, None)
        self.launcher.start(self)
        error = None
        root_task = self._start(self._run_agent(root, make_root_env))
        await asyncio.wait({root_task}, timeout=self.config.rollout_timeout_s)
        if not root_task.done():
            error = f"rollout timed out after {self.config.rollout_timeout_s:g} s"
            await self._cancel_everything()
        try:  # pending training work (rubric scores, labels): at most two policy calls deep
            await asyncio.wait_for(self.launcher.finish(self), timeout=2 * self.config.policy_timeout_s)
        except TimeoutError:
            error = error or f"finishing the launcher's pending work timed out after {2 * self.config.policy_timeout_s:g} s"
        if error is None and root.env_error is not None:
            error = f"the root environment failed: {root.env_error}"
        return RolloutTree(
            task_id=self.task.id,
            env=self.task.env,
            root_id=root.id,
            nodes=self._nodes,
            seed=self.seed,
            policy_version=self.policy_version,
            fork_groups=self._fork_groups,
            root_success=root.verified_success,
            error=error,
            started_at=started,
            wall_time_s=time.time() - started,
            counters=dict(sorted(self._counters.items())),
        )

    def _start(self, work) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        return task

    async def _cancel_everything(self) -> None:
        """Cancel every agent still running and wait (bounded) until they have recorded it, so
        the tree is built from finished records (launchers may have started agents of their own)."""
        deadline = time.monotonic() + self.config.cancel_grace_s
        while pending := [t for t in self._tasks if not t.done()]:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=left)
        for node in self._nodes.values():  # agents that never noticed the cancellation
            if node.finish_message is None and node.error is None:
                node.error = "cancelled before finishing: the rollout timed out"

    def _refusal(self, parent: NodeHandle) -> str | None:
        """Why the runtime refuses a launch from `parent` now, or None."""
        if len(self._launched.get(parent.node.id, [])) >= self.config.max_children_per_step:
            return f"one step may launch at most {self.config.max_children_per_step} subagents"
        if len(self._nodes) >= self.config.max_agents_per_tree:
            return f"this task may use at most {self.config.max_agents_per_tree} agents in all"
        if self._chars >= self.config.max_tree_chars:
            return f"this task's transcripts reached their limit of {self.config.max_tree_chars} characters"
        return None

    async def launch_child(self, parent: NodeHandle, request: ChildRequest) -> ChildResult:
        """Check the depth and the rollout's bounds, then let the launcher run the child.

        Beyond the maximum depth the launch is an error (`DelegationError`, which environments
        prevent by checking `can_delegate`); a launch past a bound is refused with a result the
        parent reads like a child that failed at once, and recorded on the parent.
        """
        if not parent.can_delegate:
            raise DelegationError(
                f"cannot launch a subagent from depth {parent.depth}: the maximum delegation "
                f"depth is {self.config.max_depth}; perform the task yourself"
            )
        if (why := self._refusal(parent)) is not None:
            self.count(Counter.LAUNCHES_REFUSED)
            parent.node.bounds_hit.append(f"launch refused: {why}")
            return ChildResult(
                node_id="-", finish_message=None, steps_used=0, budget=0, verified_success=None,
                error=f"no subagent was launched: {why}; do the work yourself",
            )
        return await self.launcher.launch(self, parent, request)

    async def run_child(
        self,
        parent: NodeHandle,
        goal: str,
        make_env: EnvFactory,
        budget: int | None = None,
        *,
        branch: tuple[str, int] | None = None,
        sampling: SamplingParams | None = None,
    ) -> ChildResult:
        """Create a child node of `parent` and run it to completion (launchers call this).

        `branch` = (fork group id, branch index) marks a counterfactual branch. `sampling` makes
        the child and everything it launches sample with these settings (best-of-N candidates);
        by default a child samples as its parent does.
        """
        child = self._new_node(goal, parent.node, budget)
        if branch is not None:
            child.fork_group_id, child.branch_index = branch
        inherited = sampling or self._sampling.get(parent.node.id)
        if inherited is not None:
            self._sampling[child.id] = inherited
        self._launched.setdefault(parent.node.id, []).append(child.id)
        # A task of its own: the child's failures and cancellation stay in the child's record.
        await self._start(self._run_agent(child, make_env))
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
        handle = NodeHandle(self, node)
        try:
            try:
                env = make_env(handle)
            except Exception as exc:
                node.env_error = f"building the environment failed: {_crash(exc)}"
                node.error = f"agent crashed: {node.env_error}"
                return
            node.messages = list(env.initial_messages())
            await self._agent_loop(node, env, handle)
        except asyncio.CancelledError:
            node.error = node.error or "cancelled before finishing"
            raise
        except Exception as exc:  # a bug or broken environment: recorded on this node only
            node.error = f"agent crashed: {_crash(exc)}"
        finally:
            if env is not None:
                await self._end_agent(node, env)
            node.ended_at = time.time()

    async def _end_agent(self, node: AgentNode, env: AgentEnv) -> None:
        """Verify, observe and close the agent's environment; a failure of any is this node's."""
        problems: list[str] = []
        try:
            verdict = env.verify(node.finish_message)
            node.verified_success, node.verifier_info = verdict.success, verdict.info
        except Exception as exc:
            problems.append(f"verify() failed: {_crash(exc)}")
        try:
            node.final_state = env.observable_state()
        except Exception as exc:
            problems.append(f"observable_state() failed: {_crash(exc)}")
        try:
            await asyncio.shield(env.close())
        except Exception as exc:
            problems.append(f"close() failed: {_crash(exc)}")
        if problems:
            node.env_error = "; ".join(problems)
            node.error = node.error or f"environment failed: {node.env_error}"

    async def _agent_loop(self, node: AgentNode, env: AgentEnv, handle: NodeHandle) -> None:
        while self.calls_made(node.id) < node.budget:
            if self._chars >= self.config.max_tree_chars:
                limit = f"the rollout's transcripts reached their limit of {self.config.max_tree_chars} characters"
                node.bounds_hit.append(limit)
                node.error = f"stopped: {limit}"
                return
            prompt_len = len(node.messages)
            started = time.time()
            self._calls[node.id] = self.calls_made(node.id) + 1
            forced = env.forced_step()
            if forced is not None:  # the environment acts in the agent's name: no model call
                if await self._take_step(node, env, handle, forced.reply, prompt_len, started, forced=forced.reason):
                    return
                continue
            self.count(Counter.POLICY_CALLS)
            t0 = time.perf_counter()
            try:
                completion = await asyncio.wait_for(
                    self.policy(list(node.messages), self._sampling.get(node.id, self.config.sampling)),
                    timeout=self.config.policy_timeout_s,
                )
            except TimeoutError:
                node.error = f"policy call timed out after {self.config.policy_timeout_s:g} s"
                return
            except Exception as exc:
                node.error = f"policy call failed: {type(exc).__name__}: {exc}"
                return
            policy_s = time.perf_counter() - t0
            self.count(Counter.PROMPT_TOKENS, completion.usage.prompt_tokens)
            self.count(Counter.COMPLETION_TOKENS, completion.usage.completion_tokens)
            finished = await self._take_step(
                node, env, handle, completion.text, prompt_len, started,
                prompt_messages=completion.prompt_messages,
                prompt_token_ids=completion.prompt_token_ids,
                completion_token_ids=completion.token_ids,
                completion_logprobs=completion.logprobs,
                finish_reason=completion.finish_reason,
                usage=completion.usage,
                policy_version=completion.policy_version,
                policy_s=policy_s,
            )
            if finished:
                return
        node.error = (
            f"exhausted the budget of {node.budget} policy calls before finishing; "
            "the task may be incomplete"
        )

    async def _take_step(
        self, node: AgentNode, env: AgentEnv, handle: NodeHandle, reply: str, prompt_len: int, started: float,
        **recorded: Any,
    ) -> bool:
        """Parse and execute `reply` as the agent's next step, record it (`recorded`: what the
        policy call adds, or `forced=`) and extend the transcript; True when the agent finished."""
        action = env.parse(reply)
        t1 = time.perf_counter()
        handle.executing(reply)
        outcome = await env.execute(action)
        node.steps.append(
            Step(
                index=len(node.steps),
                prompt_len=prompt_len,
                completion_text=reply,
                action=action,
                observation=outcome.observation,
                error=outcome.error,
                child_ids=self._launched.pop(node.id, []),
                started_at=started,
                env_s=time.perf_counter() - t1,
                **recorded,
            )
        )
        node.messages.append(Message(role="assistant", content=reply))
        node.messages.append(Message(role="user", content=outcome.observation))
        self._chars += len(reply) + len(outcome.observation)
        if outcome.finished:
            node.finish_message = outcome.finish_message
        return outcome.finished


def _crash(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"


async def run_rollout(
    task: Task,
    policy: Policy,
    make_root_env: EnvFactory,
    config: RuntimeConfig | None = None,
    *,
    seed: int | None = None,
    policy_version: int = 0,
    launcher: Launcher | None = None,
) -> RolloutTree:
    """Run one root rollout of `task` and return its tree (`launcher`: how children run)."""
    rollout = Rollout(task, policy, config, seed=seed, policy_version=policy_version, launcher=launcher)
    return await rollout.run(make_root_env)
