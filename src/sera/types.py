"""Core records: tasks, rollout trees, agent nodes, steps, fork groups.

A rollout is a tree of agents. Every saved rollout file is `RolloutTree.to_json()`, and
`RolloutTree.from_json(text)` reads it back losslessly; evaluation, credit and the tests all read
this one format. The records are plain data: no environment or model handles.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Record(BaseModel):
    """Base for all records: field docstrings become schema descriptions; unknown keys are errors."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")


class Message(Record):
    """One chat message."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    """Who speaks."""
    content: str
    """The message text."""


class Task(Record):
    """One task of an environment, as published (the RAO/SERA JSONL rows map onto this)."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)

    id: str
    """Stable task id, e.g. `textcraft_synth.val.17`."""
    goal: str
    """The root agent's goal text."""
    env: str
    """Environment name, e.g. `textcraft-synth`."""
    difficulty: str | None = None
    """Difficulty band (`easy`, `medium`, `hard`, `extreme`) when the data set has one."""
    max_steps: int | None = None
    """The step budget stored in the data file (75 in TextCraft-Synth); the runtime budget
    comes from `RuntimeConfig`, as in the paper's runs."""
    misc: dict[str, Any] = Field(default_factory=dict)
    """Environment payload (TextCraft: target_items, initial_inventory, gold_trajectory, ...)."""


class Usage(Record):
    """Token counts of one model call."""

    prompt_tokens: int = 0
    """Tokens in the prompt."""
    completion_tokens: int = 0
    """Tokens in the completion."""


class Action(Record):
    """A model reply parsed into something the environment can execute."""

    kind: Literal["code", "text", "invalid"]
    """`code`: a CodeAct cell; `text`: a tagged text-protocol action; `invalid`: unparseable."""
    thought: str = ""
    """The reasoning part of the reply, if the protocol has one."""
    body: str = ""
    """What is executed: the code of a cell, or the text action."""
    tag: Literal["action", "delegate", "finish"] | None = None
    """Text protocol only: which block the reply used."""
    parse_error: str | None = None
    """Why the reply could not be parsed (only for `invalid`)."""


class Step(Record):
    """One policy call of one agent and what followed from it (or a step the environment forced
    in the agent's name, `forced`)."""

    index: int
    """Position in the node's step list (0-based)."""
    prompt_len: int
    """The prompt was `node.messages[:prompt_len]`, unless `prompt_messages` is set."""
    prompt_messages: list[Message] | None = None
    """The exact prompt when the sampler changed it (context truncation); else None."""
    prompt_token_ids: list[int] | None = None
    """Prompt token ids when the backend reports them."""
    completion_text: str
    """The raw completion text."""
    completion_token_ids: list[int] | None = None
    """Completion token ids when the backend reports them."""
    completion_logprobs: list[float] | None = None
    """The sampler's per-token log-probabilities, aligned with `completion_token_ids`."""
    finish_reason: str | None = None
    """Why generation stopped (`stop`, `length`, ...)."""
    usage: Usage = Field(default_factory=Usage)
    """Token counts of the call."""
    action: Action
    """The parsed action."""
    observation: str
    """The text the agent received after the action (appended as the next user message)."""
    error: str | None = None
    """Error raised by the action (cell error, tool error, parse error), if any."""
    child_ids: list[str] = Field(default_factory=list)
    """Agents launched during this step, in launch order (one delegation event)."""
    started_at: float = 0.0
    """Wall-clock start (seconds since the epoch)."""
    policy_s: float = 0.0
    """Seconds spent waiting for the policy."""
    env_s: float = 0.0
    """Seconds spent executing the action (including awaited children)."""
    policy_version: int | None = None
    """The policy version (optimizer updates) whose weights sampled this step; None outside
    training or for a forced step."""
    forced: str | None = None
    """Set when the environment took this step in the agent's name instead of a policy call
    (e.g. `loop_detector`): no model produced `completion_text`, and it is never trained."""


class ModelCall(Record):
    """A model call made for training machinery, not by an agent: writing or scoring a rubric.

    Kept apart from the agent's steps so it never reaches an agent's transcript; its tokens are
    what the rubric-generation stage trains.
    """

    role: Literal["rubric", "score"]
    """`rubric`: the parent writes a rubric; `score`: the policy scores a child with one."""
    prompt_messages: list[Message]
    """The exact prompt sent."""
    prompt_token_ids: list[int] | None = None
    """Prompt token ids when the backend reports them."""
    completion_text: str = ""
    """The raw reply ('' when the call failed)."""
    completion_token_ids: list[int] | None = None
    """Completion token ids when the backend reports them."""
    completion_logprobs: list[float] | None = None
    """The sampler's per-token log-probabilities, aligned with `completion_token_ids`."""
    finish_reason: str | None = None
    """Why generation stopped."""
    temperature: float = 1.0
    """Sampling temperature of the call."""
    usage: Usage = Field(default_factory=Usage)
    """Token counts of the call."""
    error: str | None = None
    """Why the call produced no usable reply (sampler failure, parse error), if so."""
    external: bool = False
    """True when an external model (not the policy) answered; such calls are never trained."""
    policy_version: int | None = None
    """The policy version whose weights answered (training); None otherwise or when external."""
    seconds: float = 0.0
    """Wall seconds the call took (waiting included; concurrent calls overlap)."""


class AgentNode(Record):
    """One agent of the tree: the root or a child launched by a parent step."""

    id: str
    """Unique within the tree."""
    parent_id: str | None = None
    """The launching agent; None for the root."""
    fork_step: int | None = None
    """Index of the parent step that launched this agent; None for the root."""
    depth: int = 0
    """0 for the root, parent depth + 1 for a child."""
    goal: str
    """The task text this agent was given."""
    budget: int
    """Maximum number of policy calls of this agent."""
    messages: list[Message] = Field(default_factory=list)
    """The full transcript: system, first user message, then assistant/observation pairs."""
    steps: list[Step] = Field(default_factory=list)
    """Policy calls in order."""
    finish_message: str | None = None
    """The message passed to `finish`, if the agent finished explicitly."""
    error: str | None = None
    """Why the agent stopped without finishing (budget, timeout, crash, cancellation)."""
    env_error: str | None = None
    """What went wrong in the agent's environment itself (building, verifying, observing or
    closing it): a fault of the environment, not of the model; also summarised in `error`."""
    bounds_hit: list[str] = Field(default_factory=list)
    """Runtime bounds this agent ran into (a refused launch, the tree's size), one message each."""
    verified_success: bool | None = None
    """Programmatic verifier outcome, when a verifier ran."""
    verifier_info: dict[str, Any] = Field(default_factory=dict)
    """What the verifier looked at (start and end state, missing items)."""
    rubric: dict[str, Any] | None = None
    """The parent's frozen rubric for this agent (SERA), if one was written."""
    rubric_hash: str | None = None
    """sha256 of the canonical rubric JSON, taken from the frozen rubric once both the agent and
    the rubric writing had ended (the rubric was written from the launch, before the agent ran)."""
    rubric_score: float | None = None
    """The rubric score of this agent's trajectory, if scored (the gated weighted sum, or the
    scorer's own number under `score_mode: model_final`)."""
    rubric_call: ModelCall | None = None
    """The parent's rubric-writing call for this agent (SERA execution stage)."""
    score_call: ModelCall | None = None
    """The call that scored this agent with its rubric."""
    rubric_assessment: dict[str, Any] | None = None
    """The parsed score: success flag, per-criterion scores, the scorer's own final number."""
    judged_success: bool | None = None
    """The external judge's verdict on this agent's goal, when a judge ran."""
    judge_reason: str | None = None
    """The judge's reason, or why the judgement is invalid."""
    fork_group_id: str | None = None
    """The counterfactual group this agent is a branch of, if any."""
    branch_index: int | None = None
    """This agent's branch number within `fork_group_id`."""
    final_state: dict[str, Any] = Field(default_factory=dict)
    """What this agent could observe of the world when it ended (its environment's
    `observable_state()`): shown to rubric scorers and judges, never a success flag."""
    skip_gradient: bool = False
    """True when this agent must not produce training data."""
    skip_reason: str | None = None
    """Why `skip_gradient` is set."""
    started_at: float = 0.0
    """Wall-clock start (seconds since the epoch)."""
    ended_at: float = 0.0
    """Wall-clock end (seconds since the epoch)."""


class ForkBranch(Record):
    """One child run from a cloned state: a counterfactual branch or a best-of-N candidate."""

    index: int
    """Branch number within the group (0 is the one committed by default)."""
    node_id: str
    """The branch's agent node."""
    label: bool | None = None
    """Verified or judged success of the branch; None when no valid label exists."""
    label_source: Literal["verifier", "judge"] | None = None
    """Where the label came from."""
    label_error: str | None = None
    """Why the branch has no label (judge failure, unverifiable goal), if so."""
    rubric_score: float | None = None
    """Score the group's rubric gave this branch; None when the score is invalid."""
    score_call: ModelCall | None = None
    """The call that scored this branch."""


class ForkGroup(Record):
    """Children launched from one delegation point on copies of the world: B counterfactual
    branches (rubric training) or N best-of-N candidates (test time, `kind="best_of"`)."""

    id: str
    """Unique within the tree."""
    parent_id: str
    """The delegating agent."""
    parent_step: int
    """Index of the delegating step."""
    child_goal: str
    """The goal every branch received."""
    state_digest: str = ""
    """sha256 of the forked state, to show all branches started from the same state."""
    branches: list[ForkBranch] = Field(default_factory=list)
    """The branches, by index."""
    committed_branch: int | None = None
    """Which branch's end state was committed back to the parent."""
    parent_depth: int = 0
    """Depth of the delegating agent (branches are at `parent_depth + 1`)."""
    initial_state: dict[str, Any] = Field(default_factory=dict)
    """Observable state the branches started from (shown to the rubric writer)."""
    rubric: dict[str, Any] | None = None
    """The group's rubric, written once from the delegation point, scoring every branch."""
    rubric_hash: str | None = None
    """sha256 of the canonical rubric JSON."""
    rubric_call: ModelCall | None = None
    """The rubric-writing call (its completion is what the rubric stage trains)."""
    rubric_error: str | None = None
    """Why the group has no usable rubric, if so."""
    merge_conflicts: int = 0
    """State keys that a concurrent sibling and the committed branch both changed (the branch's
    value was kept)."""
    kind: Literal["counterfactual", "best_of"] = "counterfactual"
    """`counterfactual`: rubric-training branches, each labelled, branch 0 committed; `best_of`:
    test-time candidates, the selected one committed (`sera.launchers.best_of_n`)."""
    selector: str | None = None
    """best_of: what chose the committed candidate (`self`, `judge`, `first`, `random`)."""
    selection: str | None = None
    """best_of: why that candidate was committed (best score, a tie, no valid rubric, ...)."""
    temperature: float | None = None
    """best_of: the sampling temperature of the candidates and of every agent they launched."""


class DelegationEvent(Record):
    """All children launched by one parent step."""

    parent_id: str
    """The delegating agent."""
    parent_step: int
    """Index of the delegating step."""
    child_ids: list[str]
    """The children, in launch order."""


class RolloutTree(Record):
    """One root rollout: every agent of the tree, keyed by id, plus what it cost."""

    task_id: str
    """The task this rollout attempted."""
    env: str
    """Environment name."""
    root_id: str
    """Id of the root agent."""
    nodes: dict[str, AgentNode]
    """All agents, in creation order (the root first)."""
    seed: int | None = None
    """Sampling seed of the rollout, if any."""
    policy_version: int = 0
    """Version of the policy weights that produced the rollout."""
    fork_groups: list[ForkGroup] = Field(default_factory=list)
    """Counterfactual groups collected during the rollout."""
    root_success: bool | None = None
    """Verified success of the whole task."""
    error: str | None = None
    """A rollout-level failure (e.g. the environment could not be built), if any."""
    started_at: float = 0.0
    """Wall-clock start (seconds since the epoch)."""
    wall_time_s: float = 0.0
    """Seconds from start to end."""
    counters: dict[str, int] = Field(default_factory=dict)
    """Usage counters: policy calls, tokens, tool calls, world clones, ..."""

    # -- serialisation -------------------------------------------------------------------------

    def to_json(self, indent: int | None = None) -> str:
        """The canonical on-disk form."""
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> RolloutTree:
        """Read a tree written by `to_json`; raises pydantic.ValidationError naming the field."""
        return cls.model_validate_json(text)

    # -- structure -----------------------------------------------------------------------------
    # Every structural question is answered for the LIVE tree: a counterfactual group commits one
    # branch back to its parent; the other branches (and all they launched) never happened as far
    # as the root is concerned. `nodes` still holds every agent, branches included.

    @property
    def root(self) -> AgentNode:
        """The root agent."""
        return self.nodes[self.root_id]

    def live_nodes(self) -> dict[str, AgentNode]:
        """The nodes minus uncommitted branches and everything below them, in creation order.

        A node is a branch when `fork_group_id` is set; it survives only when its group's
        `committed_branch == branch_index` (a group with `committed_branch=None` keeps none).
        Raises ValueError when a node names a fork group the tree does not have, has only one of
        `fork_group_id` / `branch_index`, or its parent links are broken.
        """
        committed = {group.id: group.committed_branch for group in self.fork_groups}
        live: dict[str, AgentNode] = {}
        for node in self.nodes.values():  # creation order: a parent precedes its children
            if (node.fork_group_id is None) != (node.branch_index is None):
                raise ValueError(
                    f"node {node.id!r}: fork_group_id={node.fork_group_id!r} and "
                    f"branch_index={node.branch_index!r} must be set together"
                )
            if node.fork_group_id is not None:
                if node.fork_group_id not in committed:
                    raise ValueError(
                        f"node {node.id!r}: fork_group_id {node.fork_group_id!r} is not among the "
                        f"tree's fork groups {sorted(committed)}"
                    )
                if committed[node.fork_group_id] != node.branch_index:
                    continue
            if node.parent_id is not None and node.parent_id not in self.nodes:
                raise ValueError(f"node {node.id!r}: parent {node.parent_id!r} is not in the tree")
            if node.parent_id is None or node.parent_id in live:
                live[node.id] = node
        return live

    def _live_children(self) -> tuple[dict[str, AgentNode], dict[str, list[AgentNode]]]:
        nodes = self.live_nodes()
        kids: dict[str, list[AgentNode]] = {node_id: [] for node_id in nodes}
        for node in nodes.values():
            if node.parent_id is not None:
                kids[node.parent_id].append(node)
        return nodes, kids

    def children(self, node_id: str) -> list[AgentNode]:
        """Direct live children of a node, in creation order."""
        return self._live_children()[1].get(node_id, [])

    def leaves(self) -> list[AgentNode]:
        """Live agents that launched no live child."""
        nodes, kids = self._live_children()
        return [n for n in nodes.values() if not kids[n.id]]

    def leaves_under(self, node_id: str) -> list[AgentNode]:
        """Live leaves of the subtree rooted at `node_id` (the node itself if it has no child)."""
        _, kids = self._live_children()
        out: list[AgentNode] = []
        stack = [self.nodes[node_id]]
        while stack:
            node = stack.pop()
            below = kids.get(node.id, [])
            if not below:
                out.append(node)
            stack.extend(reversed(below))
        return out

    def descendants(self, node_id: str) -> list[AgentNode]:
        """All live agents below `node_id`, breadth first."""
        _, kids = self._live_children()
        out: list[AgentNode] = []
        frontier = kids.get(node_id, [])
        while frontier:
            out.extend(frontier)
            frontier = [c for parent in frontier for c in kids[parent.id]]
        return out

    def depth(self) -> int:
        """Deepest live agent depth (0 for a lone root)."""
        return max(n.depth for n in self.live_nodes().values())

    def delegation_events(self) -> list[DelegationEvent]:
        """Live children grouped by the parent step that launched them, in creation order.

        Raises ValueError for a child without `fork_step`."""
        events: dict[tuple[str, int], list[str]] = {}
        for node in self.live_nodes().values():
            if node.parent_id is None:
                continue
            if node.fork_step is None:
                raise ValueError(f"node {node.id!r} has parent {node.parent_id!r} but no fork_step")
            events.setdefault((node.parent_id, node.fork_step), []).append(node.id)
        return [
            DelegationEvent(parent_id=p, parent_step=s, child_ids=ids)
            for (p, s), ids in events.items()
        ]
