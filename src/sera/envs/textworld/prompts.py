"""Prompts of TextWorld-Sync agents (our wording; intent as sera-spec §2.4).

One builder serves training and evaluation alike (the reference's two builders disagree, §11.1
item 6): both show the agent's budget and the delegation rules, so a policy is trained on the
prompts it is evaluated with.
"""

from __future__ import annotations

from sera.types import Message

_SYSTEM = """\
You are agent {agent_id} at delegation depth {depth} in a shared cooking world. Several agents \
act in the same kitchen at the same time: the inventory, the counter, the tools, the door and \
the world's budget of actions are shared; each agent has its own location and its own history.

How to act:
- Issue one command at a time. Use only commands from the "Valid Actions" list you are shown; \
anything else is refused and still costs one of the world's shared actions.
{rules}- Do not invent state: rely on what the observations say.
{delegation}
Reply with exactly one block:
- <action>command</action> to act in the world,
{delegate_option}- <finish>message</finish> when your goal is done (or cannot be done); your \
message is what your parent receives, so say what you did and what is left.
Your success is checked in the world, not by reading your message."""

_DELEGATION = """
Delegation (you may delegate; maximum depth {max_depth}, you are at depth {depth}):
- Split independent work (e.g. one dish per subagent) and delegate it with
  <delegate>{{"goal": "Prepare and eat dish_2: ..."}}</delegate>, or several at once with
  <delegate>{{"delegations": [{{"goal": "..."}}, {{"goal": "..."}}]}}</delegate>.
  Subagents launched together act at the same time on the shared world.
- Write goals a subagent can act on without your history: name the dish id and each ingredient
  with its required preparation. Each subagent has at most {child_budget} steps of its own; its
  steps do not use yours. You will see each subagent's result and your current observation.
- Watch for shared limits ({limits}): subagents working at the same time may block each other.
"""

_NO_DELEGATION = """
You are at the maximum delegation depth ({max_depth}): do the work yourself.
"""


_RULES = {
    "sync": """\
- Looking around, checking the inventory and reading the cookbook are free: they cost none of \
the world's shared actions (they do use one of your own steps).
- Prepare every ingredient exactly as required: a wrong cut or cooking, or cooking something \
twice (it burns), ruins the dish and fails the task. Cooking, preparing and eating a meal \
happen in the kitchen.
""",
    "reference": """\
- Every command costs one of the world's shared actions, looking around, checking the inventory \
and reading the cookbook included.
- Only the required cut and cooking of each held ingredient are offered; cutting, cooking, \
preparing and eating work in any room.
""",
}
"""The rules paragraph of the system prompt, per rules profile (each true under its profile)."""
_LIMITS = {
    "sync": "inventory capacity, one-at-a-time tools, tool cooldowns",
    "reference": "the team's shared inventory capacity, tool cooldowns",
}
"""The shared limits the delegation section warns about, per rules profile."""


def system_prompt(agent_id: str, depth: int, max_depth: int, child_budget: int, rules: str = "sync") -> str:
    """The system message of one agent; `rules` is the task's rules profile (`rules.py`)."""
    can_delegate = depth < max_depth
    delegation = (_DELEGATION if can_delegate else _NO_DELEGATION).format(
        max_depth=max_depth, depth=depth, child_budget=child_budget, limits=_LIMITS[rules]
    )
    delegate_option = (
        '- <delegate>{"goal": "..."}</delegate> to launch subagents,\n' if can_delegate else ""
    )
    return _SYSTEM.format(
        agent_id=agent_id, depth=depth, rules=_RULES[rules], delegation=delegation, delegate_option=delegate_option
    )


VALID_ACTIONS = "Valid Actions:"
"""The line that opens the valid-actions list of an observation (one `- action` per line follows)."""


def split_valid_actions(observation: str) -> tuple[str, str]:
    """An observation as (state lines, the `Valid Actions:` block); the block is '' if absent."""
    at = observation.find(VALID_ACTIONS)
    if at < 0:
        return observation.rstrip(), ""
    return observation[:at].rstrip(), observation[at:].rstrip()


def action_space(can_delegate: bool, max_depth: int) -> str:
    """The `# Action Space` section: the reply blocks an agent may write, numbered."""
    delegate = (
        '3. <delegate>{"goal": "..."}</delegate>: launch one subagent with a self-contained goal, or '
        'several at once with {"delegations": [{"goal": "..."}, ...]}; they act at the same time.'
        if can_delegate
        else f"3. <delegate>: not available to you, you are at the maximum delegation depth ({max_depth})."
    )
    return "\n".join((
        "1. <action>command</action>: one command from the Valid Actions list.",
        "2. <action>inventory</action>: look at the team's shared inventory.",
        delegate,
        "4. <finish>message</finish>: end your episode; the message is your report to your parent.",
        "Write exactly one block per reply.",
    ))


def initial_messages(
    goal: str,
    observation: str,
    *,
    agent_id: str,
    depth: int,
    max_depth: int,
    budget: int,
    child_budget: int,
    rules: str = "sync",
) -> list[Message]:
    """System prompt and first user message of one agent.

    The first message has the reference's sections: task and budget, the initial observation,
    the valid actions, the action space and a delegation pointer, then the first-action request.
    """
    can_delegate = depth < max_depth
    state, actions = split_valid_actions(observation)
    delegation = (
        "Follow the delegation rules of the system prompt; each subagent's result is shown to you "
        "after it returns, under [SubAgent Results]."
        if can_delegate
        else "You cannot delegate at this depth: do the work yourself."
    )
    user = (
        f"# Task\n{goal}\n\nBudget: you have {budget} steps (replies) of your own for this task.\n\n"
        f"# Initial Observation\n{state}\n\n"
        f"# Valid Actions\n{actions or VALID_ACTIONS + ' none.'}\n\n"
        f"# Action Space\n{action_space(can_delegate, max_depth)}\n\n"
        f"# Delegation\n{delegation}\n\n"
        "Now provide your first action" + (" or delegation." if can_delegate else ".")
    )
    return [
        Message(role="system", content=system_prompt(agent_id, depth, max_depth, child_budget, rules)),
        Message(role="user", content=user),
    ]


def status_lines(*, eaten: int, dishes: int, success: bool, failure: str | None, done: bool) -> str:
    """The four status lines of every step message (score, success, failure, done)."""
    return "\n".join((
        f"Score: {eaten}/{dishes} dishes eaten",
        f"Task Success: {'yes' if success else 'no'}",
        f"Task Failure: {f'yes ({failure})' if failure else 'no'}",
        f"Done: {'yes' if done else 'no'}",
    ))


def turn_footer(steps_used: int, budget: int, can_delegate: bool, status: str) -> str:
    """The end of every step message: the agent's own budget, the world's status, what to do next."""
    ask = "Provide your next action or delegation." if can_delegate else "Provide your next action."
    pointer = "Results of subagents you launch appear under [SubAgent Results] in the step that launched them.\n" if can_delegate else ""
    return (
        f"Budget used by you: {steps_used}/{budget} steps.\n"
        f"Budget remaining: {budget - steps_used} steps.\n"
        f"{status}\n{pointer}{ask}"
    )
