"""Turn a `RolloutTree` into the page's view model (`sera.view.records`).

Pure functions of a recorded tree. Everything the tree records about a node is kept except
what is stored twice or is only for training (see `records`); a rubric is shown with the
scores of the one child it was applied to, and a fork group's branch scores are read back from
the branch's score reply, since a branch record keeps only the total.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sera.rubric.schema import RubricLimits, rubric_from_dict
from sera.rubric.score import parse_assessment
from sera.types import AgentNode, ForkBranch, ForkGroup, ModelCall, RolloutTree, Step
from sera.view.records import (
    AssessmentView,
    BranchView,
    CallView,
    CriterionView,
    GroupView,
    NodeView,
    RubricView,
    StepView,
    TreeView,
)

# Only to match a branch's score reply to criterion names: the rubric was validated when it was
# written, under whatever limits that run used, so the loosest limits read any stored one.
_ANY_RUBRIC = RubricLimits(
    min_criteria=1, max_criteria=None, renormalise=True, require_score_anchors=False, min_failure_conditions=0
)


def tree_view(tree: RolloutTree) -> TreeView:
    """The view model of `tree`; raises ValueError when its node links are broken."""
    _check_links(tree)
    live = tree.live_nodes()
    groups = {group.id: group for group in tree.fork_groups}
    kids: dict[str, list[str]] = {node_id: [] for node_id in tree.nodes}
    for node in tree.nodes.values():
        if node.parent_id is not None and node.parent_id in kids:
            kids[node.parent_id].append(node.id)
    groups_at: dict[tuple[str, int], list[str]] = {}
    for group in tree.fork_groups:
        groups_at.setdefault((group.parent_id, group.parent_step), []).append(group.id)
    texts: list[str] = []
    text_index: dict[str, int] = {}

    def shared(text: str) -> int:
        if text not in text_index:
            text_index[text] = len(texts)
            texts.append(text)
        return text_index[text]

    nodes = [
        _node(node, node.id in live, kids[node.id], groups.get(node.fork_group_id or ""), groups_at, shared)
        for node in tree.nodes.values()
    ]
    return TreeView(
        task_id=tree.task_id,
        env=tree.env,
        seed=tree.seed,
        policy_version=tree.policy_version,
        root_id=tree.root_id,
        root_success=tree.root_success,
        error=tree.error,
        started_at=tree.started_at,
        wall_time_s=tree.wall_time_s,
        counters=dict(tree.counters),
        depth=max((n.depth for n in live.values()), default=0),
        live_agents=len(live),
        texts=texts,
        nodes=nodes,
        groups=[_group(group) for group in tree.fork_groups],
    )


def _check_links(tree: RolloutTree) -> None:
    """Every node must reach the root through its parents: the page draws the tree from the root
    down and walks parent links up, so an orphan or a cycle would be lost or loop."""
    if tree.root_id not in tree.nodes or tree.nodes[tree.root_id].parent_id is not None:
        raise ValueError(f"root {tree.root_id!r} is not a node without a parent")
    reaches_root = {tree.root_id}
    for node in tree.nodes.values():
        path: list[str] = []
        current: AgentNode | None = node
        while current is not None and current.id not in reaches_root:
            if current.id in path or current.parent_id is None:
                raise ValueError(f"node {node.id!r} is not connected to the root {tree.root_id!r}")
            path.append(current.id)
            current = tree.nodes.get(current.parent_id)
        if current is None:
            raise ValueError(f"node {path[-1]!r}: parent is not in the tree")
        reaches_root.update(path)


def _node(
    node: AgentNode,
    live: bool,
    child_ids: list[str],
    group: ForkGroup | None,
    groups_at: Mapping[tuple[str, int], list[str]],
    shared: Any,
) -> NodeView:
    steps = [_step(step, groups_at.get((node.id, step.index), [])) for step in node.steps]
    calls = [_call(c) for c in (node.rubric_call, node.score_call) if c is not None]
    rubric, assessment = None, None
    if node.rubric is not None:
        scores = (node.rubric_assessment or {}).get("criterion_scores") or {}
        rubric = _rubric(node.rubric, node.rubric_hash, scores if isinstance(scores, Mapping) else {})
        assessment = _assessment(node.rubric_assessment, node.rubric_score, rubric)
    elif node.rubric_score is not None:  # a score without a stored rubric: still show the number
        assessment = AssessmentView(gate=None, score=node.rubric_score)
    branch = _branch_of(node, group)
    if branch is not None and group is not None and rubric is None and group.rubric is not None:
        # A branch is scored with its group's rubric; show that rubric with this branch's scores.
        view = _branch(branch, group)
        rubric = _rubric(group.rubric, group.rubric_hash, view.criterion_scores)
        assessment = view.assessment or AssessmentView(gate=None, score=branch.rubric_score)
        if branch.score_call is not None:
            calls.append(_call(branch.score_call))
    prompt_len = node.steps[0].prompt_len if node.steps else min(2, len(node.messages))
    opening = node.messages[:prompt_len]
    system = next((m.content for m in opening if m.role == "system"), None)
    first_user = next((m.content for m in opening if m.role == "user"), "")
    return NodeView(
        id=node.id,
        parent_id=node.parent_id,
        depth=node.depth,
        fork_step=node.fork_step,
        goal=node.goal,
        budget=node.budget,
        child_ids=child_ids,
        live=live,
        group_id=node.fork_group_id,
        branch_index=node.branch_index,
        committed=None if group is None else group.committed_branch == node.branch_index,
        finish_message=node.finish_message,
        error=node.error,
        env_error=node.env_error,
        bounds_hit=list(node.bounds_hit),
        verified_success=node.verified_success,
        judged_success=node.judged_success,
        judge_reason=node.judge_reason,
        skip_reason=node.skip_reason,
        rubric=rubric,
        assessment=assessment,
        calls=calls,
        prompt_tokens=sum(s.usage.prompt_tokens for s in node.steps),
        completion_tokens=sum(s.usage.completion_tokens for s in node.steps),
        call_tokens=sum(c.prompt_tokens + c.completion_tokens for c in calls),
        policy_s=sum(s.policy_s for s in node.steps),
        env_s=sum(s.env_s for s in node.steps),
        wall_s=node.ended_at - node.started_at if node.started_at and node.ended_at >= node.started_at else None,
        system_prompt=None if system is None else shared(system),
        first_prompt=first_user,
        final_state=node.final_state,
        verifier_info=node.verifier_info,
        steps=steps,
    )


def _step(step: Step, group_ids: list[str]) -> StepView:
    action = step.action
    # The thought and body are the parse of the completion; the raw text adds nothing unless the
    # parse failed (or found nothing), so it is kept only then.
    unparsed = action.kind == "invalid" or not (action.thought or action.body)
    return StepView(
        index=step.index,
        kind=action.kind,
        tag=action.tag,
        thought=action.thought,
        body=action.body,
        raw=step.completion_text if unparsed and step.completion_text else None,
        parse_error=action.parse_error,
        observation=step.observation,
        error=step.error,
        forced=step.forced,
        finish_reason=step.finish_reason,
        prompt_tokens=step.usage.prompt_tokens,
        completion_tokens=step.usage.completion_tokens,
        policy_s=step.policy_s,
        env_s=step.env_s,
        child_ids=list(step.child_ids),
        group_ids=group_ids,
        prompt_rewritten=step.prompt_messages is not None,
    )


def _call(call: ModelCall) -> CallView:
    return CallView(
        role=call.role,
        error=call.error,
        prompt_tokens=call.usage.prompt_tokens,
        completion_tokens=call.usage.completion_tokens,
        external=call.external,
        reply=call.completion_text if call.error else None,
    )


def _rubric(data: Mapping[str, Any], digest: str | None, scores: Mapping[str, Any]) -> RubricView:
    """The stored rubric with `scores` (by criterion name) attached; an off-schema rubric is
    kept whole as `raw` rather than guessed at."""
    items = data.get("rubric_items")
    if not isinstance(items, list) or not all(isinstance(i, Mapping) and isinstance(i.get("name"), str) for i in items):
        return RubricView(criteria=[], hash=digest, raw=json.dumps(data, indent=2, ensure_ascii=False, default=str))
    by_name = {str(k).strip().casefold(): v for k, v in scores.items()}
    criteria = [
        CriterionView(
            name=item["name"],
            weight=_number(item.get("weight")),
            description=_string(item.get("description")),
            score_0=_string(item.get("score_0")),
            score_full=_string(item.get("score_full")),
            score=_number(by_name.get(item["name"].strip().casefold())),
        )
        for item in items
    ]
    conditions = data.get("failure_conditions")
    return RubricView(
        criteria=criteria,
        success_gate=_string(data.get("success_gate")),
        failure_conditions=[_string(c) for c in conditions] if isinstance(conditions, list) else [],
        scoring_procedure=_string(data.get("scoring_procedure")),
        hash=digest,
    )


def _assessment(data: Mapping[str, Any] | None, score: float | None, rubric: RubricView) -> AssessmentView:
    if not data:
        return AssessmentView(gate=None, score=score)
    names = {c.name.strip().casefold() for c in rubric.criteria}
    scores = data.get("criterion_scores") or {}
    unmatched = {
        str(k): v for k, v in scores.items() if str(k).strip().casefold() not in names and _number(v) is not None
    } if isinstance(scores, Mapping) and rubric.criteria else {}
    gate = data.get("success")
    return AssessmentView(
        gate=gate if isinstance(gate, bool) else None,
        score=score,
        model_final=_number(data.get("model_final")),
        reason=_string(data.get("reason")),
        unmatched=unmatched,
    )


def _branch_of(node: AgentNode, group: ForkGroup | None) -> ForkBranch | None:
    if group is None:
        return None
    return next((b for b in group.branches if b.node_id == node.id), None)


def _branch(branch: ForkBranch, group: ForkGroup) -> BranchView:
    view = BranchView(
        index=branch.index,
        node_id=branch.node_id,
        committed=group.committed_branch == branch.index,
        label=branch.label,
        label_source=branch.label_source,
        label_error=branch.label_error,
        rubric_score=branch.rubric_score,
    )
    call = branch.score_call
    if call is None:
        return view
    if call.error or group.rubric is None:
        view.score_error = call.error
        return view
    try:
        rubric = rubric_from_dict(group.rubric, _ANY_RUBRIC)
        parsed = parse_assessment(call.completion_text, rubric, "gated")
    except ValueError:
        try:  # a `model_final` run keeps per-criterion scores only when well formed
            parsed = parse_assessment(call.completion_text, rubric, "model_final")
        except ValueError as exc:
            view.score_error = f"the score reply does not parse: {str(exc).splitlines()[0]}"
            return view
    view.criterion_scores = dict(parsed.criterion_scores)
    view.assessment = AssessmentView(
        gate=parsed.success, score=branch.rubric_score, model_final=parsed.model_final, reason=parsed.reason
    )
    return view


def _group(group: ForkGroup) -> GroupView:
    # Read with getattr: these fields came with best-of-N, and older records lack them.
    kind, selector, selection, temperature = (
        getattr(group, name, None) for name in ("kind", "selector", "selection", "temperature")
    )
    return GroupView(
        id=group.id,
        kind=kind if isinstance(kind, str) else None,
        selector=selector if isinstance(selector, str) else None,
        selection=selection if isinstance(selection, str) else None,
        temperature=_number(temperature),
        parent_id=group.parent_id,
        parent_step=group.parent_step,
        child_goal=group.child_goal,
        state_digest=group.state_digest,
        committed_branch=group.committed_branch,
        merge_conflicts=group.merge_conflicts,
        rubric=None if group.rubric is None else _rubric(group.rubric, group.rubric_hash, {}),
        rubric_error=group.rubric_error,
        calls=[_call(group.rubric_call)] if group.rubric_call is not None else [],
        branches=[_branch(b, group) for b in group.branches],
    )


def _number(value: Any) -> float | None:
    # bool is an int in Python; a JSON `true` is not a weight or a score.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else json.dumps(value, default=str))
