"""The view model: what the HTML page shows of a rollout tree, flattened for the browser.

These records are built from a `RolloutTree` by `sera.view.build` and embedded in the page as
JSON; the page's script reads them field by field. They drop what a person does not read and
what is stored twice in a tree (the transcript repeats every step's completion and observation;
token ids and logprobs are numbers for training; rubric and score prompts repeat the child's
whole trajectory), so a page is several times smaller than the trees it shows.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from sera.types import Record


class CallView(Record):
    """A rubric-writing or rubric-scoring model call, reduced to its outcome."""

    role: str
    """`rubric` or `score`."""
    error: str | None = None
    """Why the call gave no usable reply, if so."""
    prompt_tokens: int = 0
    """Prompt tokens of the call."""
    completion_tokens: int = 0
    """Completion tokens of the call."""
    external: bool = False
    """True when an external model answered instead of the policy."""
    reply: str | None = None
    """The raw reply, kept only when it could not be used (otherwise the parsed rubric or score
    shows what it said)."""


class CriterionView(Record):
    """One rubric criterion, with the score the scorer gave it when the rubric was applied."""

    name: str
    """The criterion's name."""
    weight: float | None
    """Its weight (None when the stored rubric has no usable number)."""
    description: str
    """What it checks."""
    score_0: str = ""
    """What earns 0."""
    score_full: str = ""
    """What earns full credit."""
    score: float | None = None
    """The score in [0, 1] the scorer gave this criterion; None when not scored."""


class RubricView(Record):
    """A frozen rubric as written, with one application of it (one child's scores)."""

    criteria: list[CriterionView]
    """The weighted items in the writer's order (empty when the stored rubric is not in the
    published schema; `raw` holds it then)."""
    success_gate: str = ""
    """The condition without which the score is 0."""
    failure_conditions: list[str] = Field(default_factory=list)
    """Ways the child can fail the gate."""
    scoring_procedure: str = ""
    """The writer's instructions for combining the criteria."""
    hash: str | None = None
    """sha256 of the canonical rubric JSON (shows it is the frozen one)."""
    raw: str | None = None
    """The stored rubric as JSON text, when it is not in the published schema."""


class AssessmentView(Record):
    """How a rubric scorer judged one child."""

    gate: bool | None
    """The scorer's verdict on the success gate; None when no usable score exists."""
    score: float | None
    """The rubric score (the gated weighted sum, or the scorer's own under `model_final`)."""
    model_final: float | None = None
    """The scorer's own final number (a diagnostic in `gated` mode)."""
    reason: str = ""
    """The scorer's justification."""
    unmatched: dict[str, float] = Field(default_factory=dict)
    """Scores given to names that are not criteria of the rubric (shown, not silently dropped)."""


class StepView(Record):
    """One step of an agent: what it thought, did and saw."""

    index: int
    """Position in the agent's step list."""
    kind: str
    """`code`, `text` or `invalid`."""
    tag: str | None = None
    """Text protocol: `action`, `delegate` or `finish`."""
    thought: str = ""
    """The reasoning part of the reply."""
    body: str = ""
    """The code cell or the text action."""
    raw: str | None = None
    """The raw completion, kept only when the reply could not be parsed."""
    parse_error: str | None = None
    """Why the reply could not be parsed."""
    observation: str = ""
    """What the agent saw after the action."""
    error: str | None = None
    """The action's error, if any."""
    forced: str | None = None
    """Set when the environment took this step in the agent's name."""
    finish_reason: str | None = None
    """Why generation stopped."""
    prompt_tokens: int = 0
    """Prompt tokens of the call."""
    completion_tokens: int = 0
    """Completion tokens of the call."""
    policy_s: float = 0.0
    """Seconds waiting for the policy."""
    env_s: float = 0.0
    """Seconds executing the action, awaited children included."""
    child_ids: list[str] = Field(default_factory=list)
    """Agents launched in this step (every branch of a fork group included)."""
    group_ids: list[str] = Field(default_factory=list)
    """Fork groups launched at this step."""
    prompt_rewritten: bool = False
    """True when the sampler sent a changed prompt (context truncation)."""


class NodeView(Record):
    """One agent: its goal, outcome, cost, rubric and steps."""

    id: str
    """The node id."""
    parent_id: str | None
    """The launching agent."""
    depth: int
    """0 for the root."""
    fork_step: int | None
    """The parent step that launched it."""
    goal: str
    """The agent's goal text."""
    budget: int
    """Policy calls allowed."""
    child_ids: list[str]
    """Every child in creation order, uncommitted branches included."""
    live: bool
    """False for an uncommitted branch and everything below it (it never happened as far as
    the root is concerned)."""
    group_id: str | None = None
    """The fork group this agent is a branch of."""
    branch_index: int | None = None
    """Its branch number in `group_id`."""
    committed: bool | None = None
    """For a branch: whether it is the one committed back to the parent."""
    finish_message: str | None = None
    """The `finish` message."""
    error: str | None = None
    """Why it stopped without finishing."""
    env_error: str | None = None
    """A fault of its environment."""
    bounds_hit: list[str] = Field(default_factory=list)
    """Runtime bounds it ran into."""
    verified_success: bool | None = None
    """The verifier's verdict."""
    judged_success: bool | None = None
    """The external judge's verdict."""
    judge_reason: str | None = None
    """The judge's reason."""
    skip_reason: str | None = None
    """Why it produces no training data, if so."""
    rubric: RubricView | None = None
    """Its parent's frozen rubric, with this agent's criterion scores (or its fork group's rubric
    with this branch's scores)."""
    assessment: AssessmentView | None = None
    """How the scorer judged it with that rubric."""
    calls: list[CallView] = Field(default_factory=list)
    """The rubric-writing and scoring calls made about this agent."""
    prompt_tokens: int = 0
    """Prompt tokens of its own steps."""
    completion_tokens: int = 0
    """Completion tokens of its own steps."""
    call_tokens: int = 0
    """Tokens (prompt and completion) of the rubric calls made about it."""
    policy_s: float = 0.0
    """Seconds its steps waited for the policy."""
    env_s: float = 0.0
    """Seconds its actions took (awaited children included)."""
    wall_s: float | None = None
    """Seconds from its start to its end; None when not recorded."""
    system_prompt: int | None = None
    """Index of its system prompt in `TreeView.texts` (shared: siblings use the same one)."""
    first_prompt: str = ""
    """The first user message it was given (the goal with its instructions)."""
    final_state: dict[str, Any] = Field(default_factory=dict)
    """What it could observe when it ended."""
    verifier_info: dict[str, Any] = Field(default_factory=dict)
    """What the verifier looked at."""
    steps: list[StepView] = Field(default_factory=list)
    """Its steps."""


class BranchView(Record):
    """One branch of a fork group."""

    index: int
    """Branch number."""
    node_id: str
    """The branch's agent."""
    committed: bool
    """Whether this branch was committed back to the parent."""
    label: bool | None = None
    """Verified or judged success; None when no valid label exists."""
    label_source: str | None = None
    """`verifier` or `judge`."""
    label_error: str | None = None
    """Why there is no label."""
    rubric_score: float | None = None
    """The group rubric's score for this branch."""
    assessment: AssessmentView | None = None
    """The parsed score reply (gate, reason), when it parses."""
    criterion_scores: dict[str, float] = Field(default_factory=dict)
    """Score per criterion of the group rubric."""
    score_error: str | None = None
    """Why the branch has no usable score."""


class GroupView(Record):
    """A fork group: B branches run from one delegation point, one committed."""

    id: str
    """The group id."""
    kind: str | None = None
    """What the group was for, when the record says: `counterfactual` (rubric training) or
    `best_of` (test-time best-of-N)."""
    selector: str | None = None
    """best_of: what chose the committed candidate (`self`, `judge`, `first`, `random`)."""
    selection: str | None = None
    """best_of: why that candidate was committed."""
    temperature: float | None = None
    """best_of: the candidates' sampling temperature."""
    parent_id: str
    """The delegating agent."""
    parent_step: int
    """The delegating step."""
    child_goal: str
    """The goal every branch got."""
    state_digest: str = ""
    """sha256 of the state all branches started from."""
    committed_branch: int | None = None
    """The committed branch; None when none was."""
    merge_conflicts: int = 0
    """State keys a sibling and the committed branch both changed."""
    rubric: RubricView | None = None
    """The group's rubric (criterion scores left empty: each branch has its own)."""
    rubric_error: str | None = None
    """Why the group has no usable rubric."""
    calls: list[CallView] = Field(default_factory=list)
    """The group's rubric-writing call."""
    branches: list[BranchView] = Field(default_factory=list)
    """The branches by index."""


class TreeView(Record):
    """A whole rollout tree, ready for the page."""

    task_id: str
    """The task."""
    env: str
    """The environment."""
    seed: int | None = None
    """Sampling seed."""
    policy_version: int = 0
    """Policy weights version."""
    root_id: str
    """The root agent."""
    root_success: bool | None = None
    """Verified success of the task."""
    error: str | None = None
    """A rollout-level failure."""
    started_at: float = 0.0
    """Wall-clock start (seconds since the epoch)."""
    wall_time_s: float = 0.0
    """Seconds from start to end."""
    counters: dict[str, int] = Field(default_factory=dict)
    """The tree's usage counters."""
    depth: int = 0
    """Deepest agent of the live tree."""
    live_agents: int = 0
    """Agents of the live tree (uncommitted branches left out)."""
    texts: list[str] = Field(default_factory=list)
    """Long texts that many nodes share (system prompts), stored once."""
    nodes: list[NodeView]
    """Every agent in creation order, uncommitted branches included."""
    groups: list[GroupView] = Field(default_factory=list)
    """The fork groups."""


class EntryView(Record):
    """One row of a run's index: a tree file, readable or not."""

    path: str
    """The file, relative to the folder viewed."""
    block: int | None = None
    """Number of the page's embedded tree block; None when the tree is not embedded."""
    unreadable: str | None = None
    """Why the file could not be read as a tree (one line)."""
    skipped: str | None = None
    """Why a readable tree is not embedded (the page's size limit)."""
    step: int | None = None
    """Training step, from a `step_NNNNN` folder."""
    sample: int | None = None
    """Sample number k, from the file name."""
    task_id: str = ""
    """The task."""
    seed: int | None = None
    """Sampling seed."""
    success: bool | None = None
    """Verified success of the task."""
    error: str | None = None
    """A rollout-level failure, or the root agent's error."""
    goal: str = ""
    """The root goal (the index's search box looks here)."""
    agents: int = 0
    """Agents in the file (branches included)."""
    depth: int = 0
    """Deepest live agent."""
    policy_calls: int = 0
    """Agent steps."""
    tokens: int = 0
    """Prompt plus completion tokens of agent steps and rubric calls."""
    wall_time_s: float = 0.0
    """Seconds the rollout took."""
    fork_groups: int = 0
    """Fork groups in the tree."""


class PageView(Record):
    """What the page knows before any tree is opened."""

    title: str
    """Shown at the top."""
    source: str
    """The path that was viewed."""
    kind: str
    """`tree` (one file), `eval` (an evaluation run), `train` (a training run) or `folder`."""
    run_info: dict[str, Any] = Field(default_factory=dict)
    """Top-level settings of the run (from `run.json`), when there is one."""
    entries: list[EntryView]
    """The tree files, in natural path order."""
