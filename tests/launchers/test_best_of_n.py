"""Best-of-N at test time: candidates on copies, the best committed, bottom-up, capped, counted."""

from __future__ import annotations

import asyncio
import json

import httpx2
import pytest
from typer.testing import CliRunner

from sera.cli import app
from sera.envs.registry import get_env
from sera.eval.best_of import best_of_report
from sera.eval.harness import evaluate
from sera.judge import JudgeClient
from sera.launchers.best_of_n import BestOf, BestOfNLauncher, best_of_launcher, pick_best
from sera.launchers.rubric_calls import WrittenRubric
from sera.rubric import RUBRIC_SCORER_MARKER, RUBRIC_WRITER_MARKER
from sera.runtime.agent_env import Outcome, Verdict
from sera.runtime.config import RuntimeConfig
from sera.runtime.delegation import ForkPoint, NodeHandle
from sera.runtime.policy import Completion, SamplingParams
from sera.runtime.rollout import run_rollout
from sera.rubric.scripted import RubricOracle, score_trajectory, write_rubric
from sera.testing.sabotage import SabotagedPolicy
from sera.types import Action, Message, Task, Usage

MACHINERY_WORDS = ("candidate", "best-of", "rubric", "fork cap", "selector")


# -- a forkable scripted world -------------------------------------------------------------------


class Shelf:
    """A world of item counts that can be copied and merged (additive deltas)."""

    def __init__(self, items: dict[str, int] | None = None) -> None:
        self.items = dict(items or {})

    def clone(self) -> Shelf:
        return Shelf(self.items)

    def snapshot(self) -> dict[str, int]:
        return dict(self.items)

    def merge(self, branch: Shelf, base: Shelf) -> int:
        for key in branch.items.keys() | base.items.keys():
            delta = branch.items.get(key, 0) - base.items.get(key, 0)
            if delta:
                self.items[key] = self.items.get(key, 0) + delta
        return 0


class ShelfEnv:
    """Replies: `make X` adds an X, `fail` is an action that errs, `spawn g1,g2` delegates,
    `finish M` ends (verified iff M starts with "ok"). The system message names the agent's
    branch index, so a scripted policy can make the candidates of a group differ."""

    def __init__(self, handle: NodeHandle, world: Shelf) -> None:
        self.handle, self.world = handle, world

    def initial_messages(self) -> list[Message]:
        branch = self.handle.node.branch_index
        return [Message(role="system", content=f"variant {branch or 0}"),
                Message(role="user", content=self.handle.node.goal)]

    def parse(self, reply: str) -> Action:
        return Action(kind="text", body=reply)

    async def execute(self, action: Action) -> Outcome:
        cmd, _, arg = action.body.partition(" ")
        if cmd == "finish":
            return Outcome(observation="done", finished=True, finish_message=arg)
        if cmd == "make":
            self.world.items[arg] = self.world.items.get(arg, 0) + 1
            return Outcome(observation=f"made {arg}")
        if cmd == "spawn":
            def env_on(world: Shelf):
                return lambda handle: ShelfEnv(handle, world)

            fork = ForkPoint(world=self.world, env_on=env_on, observe=self.observable_state, tools="make, finish")
            results = await asyncio.gather(*(self.handle.launch(g, env_on(self.world), fork=fork) for g in arg.split(",")))
            return Outcome(observation=" | ".join(str(r.finish_message or r.error) for r in results))
        return Outcome(observation=f"cannot {action.body}", error="unknown command")

    def forced_step(self) -> None:
        return None

    def verify(self, finish_message: str | None) -> Verdict:
        return Verdict(success=bool(finish_message and finish_message.startswith("ok")), info={})

    def observable_state(self) -> dict:
        return {"items": dict(self.world.items)}

    async def close(self) -> None:
        return None


class VariantPolicy:
    """Replies from `script[goal][variant]`, one per turn (the last repeats); the variant is the
    agent's branch index named in its system message (0 outside a group). Records every call."""

    def __init__(self, script: dict[str, list[list[str]]]) -> None:
        self.script = script
        self.calls: list[tuple[str, int, float, int | None]] = []  # goal, variant, temperature, seed

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        goal, variant = messages[1].content, int(messages[0].content.split()[1])
        self.calls.append((goal, variant, sampling.temperature, sampling.seed))
        variants = self.script[goal]
        replies = variants[min(variant, len(variants) - 1)]
        turn = sum(1 for m in messages if m.role == "assistant")
        return Completion(text=replies[min(turn, len(replies) - 1)],
                          usage=Usage(prompt_tokens=10 * len(messages), completion_tokens=3))


TASK = Task(id="shelf.0", goal="stock the shelf", env="shelf")
GOOD, GIVE_UP = ["make a", "finish ok-a"], ["finish ok-nothing"]
CONFIG = RuntimeConfig(sampling=SamplingParams(temperature=0.0, seed=7))


async def _run(script, settings: BestOf, *, launcher=None, seed=7, config=CONFIG):
    agent = VariantPolicy(script)
    policy = RubricOracle(agent)
    launcher = launcher or best_of_launcher(settings, policy, seed=seed)
    world = Shelf()
    tree = await run_rollout(TASK, policy, lambda h: ShelfEnv(h, world), config, seed=seed, launcher=launcher)
    return tree, world, agent


# -- selection -----------------------------------------------------------------------------------


async def test_the_best_scoring_candidate_is_committed_and_the_others_leave_no_trace():
    # Candidate 0 makes a b, hits an error and finishes; candidate 1 makes an a cleanly: 1 wins.
    script = {"stock the shelf": [["spawn fill", "finish ok"]],
              "fill": [["make b", "oops", "finish ok-b"], GOOD]}
    tree, world, _ = await _run(script, BestOf(n=2))
    (group,) = tree.fork_groups
    assert group.kind == "best_of" and group.selector == "self" and group.temperature == 1.0
    scores = [b.rubric_score for b in group.branches]
    assert scores[1] > scores[0] > 0 and group.committed_branch == 1
    assert group.selection.startswith("best: candidate 1") and group.rubric is not None and len(group.rubric_hash) == 64
    # The world holds only the committed candidate's work; the live tree only its node.
    assert world.items == {"a": 1} and tree.root.final_state == {"items": {"a": 1}}
    live = tree.live_nodes()
    assert set(live) == {tree.root_id, group.branches[1].node_id} and len(tree.nodes) == 3
    assert tree.root.steps[0].observation == "ok-a" and tree.root_success is True
    assert all("ok-b" not in m.content for m in tree.root.messages)


async def test_a_tie_goes_to_the_first_candidate():
    script = {"stock the shelf": [["spawn fill", "finish ok"]], "fill": [["make b", "finish ok-b"], GOOD]}
    tree, world, _ = await _run(script, BestOf(n=2))
    (group,) = tree.fork_groups
    assert group.branches[0].rubric_score == group.branches[1].rubric_score > 0
    assert group.committed_branch == 0 and group.selection.startswith("tie:") and world.items == {"b": 1}


def test_pick_best_rules():
    assert pick_best([0.2, 0.9, 0.9]).index == 1
    assert pick_best([None, 0.1]).index == 1
    choice = pick_best([None, None])
    assert choice.index == 0 and choice.reason.startswith("no_valid_score")


async def test_an_invalid_rubric_commits_the_first_candidate():
    class NoRubric:
        async def write(self, context):
            return WrittenRubric(None, None, "invalid rubric: no JSON")

    class Never:
        async def score(self, rubric, child):  # pragma: no cover - must not be called
            raise AssertionError("no rubric, no scoring")

    script = {"stock the shelf": [["spawn fill", "finish ok"]], "fill": [GIVE_UP, GOOD]}
    launcher = BestOfNLauncher(BestOf(n=2), NoRubric(), Never())
    tree, world, _ = await _run(script, BestOf(n=2), launcher=launcher)
    (group,) = tree.fork_groups
    assert group.committed_branch == 0 and group.selection.startswith("no_rubric") and group.rubric_error
    assert world.items == {}


async def test_nested_delegations_select_bottom_up_and_candidates_sample_at_temperature_one():
    # Each mid candidate delegates a leaf; each leaf group holds a giver-up and a worker.
    script = {"stock the shelf": [["spawn mid", "finish ok"]],
              "mid": [["spawn leaf", "finish ok-mid"]],
              "leaf": [GIVE_UP, GOOD]}
    tree, world, agent = await _run(script, BestOf(n=2))
    outer, *inner = sorted(tree.fork_groups, key=lambda g: g.parent_depth)
    assert outer.parent_id == tree.root_id and len(inner) == 2
    mids = {b.node_id for b in outer.branches}
    for group in inner:  # each leaf group was decided inside its mid candidate, before the outer one
        assert group.parent_id in mids and group.committed_branch == 1
        leaf = tree.nodes[group.branches[1].node_id]
        assert leaf.ended_at <= tree.nodes[outer.branches[outer.committed_branch].node_id].ended_at
    committed_mid = outer.branches[outer.committed_branch].node_id
    live = tree.live_nodes()
    assert [n.goal for n in live.values()] == ["stock the shelf", "mid", "leaf"]
    assert live[committed_mid].steps[0].observation == "ok-a"
    assert world.items == {"a": 1}  # one leaf's work, committed through its mid
    # The root is greedy; every candidate and what it launched samples at temperature 1, each
    # candidate with its own seed.
    assert {t for goal, _, t, _ in agent.calls if goal == "stock the shelf"} == {0.0}
    assert {t for goal, _, t, _ in agent.calls if goal != "stock the shelf"} == {1.0}
    leaf_seeds = {s for goal, _, _, s in agent.calls if goal == "leaf"}
    assert len(leaf_seeds) == 4 and 7 not in leaf_seeds
    assert tree.counters["best_of_groups"] == 3 and tree.counters["best_of_candidates"] == 6


@pytest.mark.parametrize(("cap", "groups", "skipped"), [(0, 0, 2), (2, 1, 2), (4, 2, 1), (6, 3, 0)])
async def test_the_fork_cap_is_honoured_and_counted(cap, groups, skipped):
    script = {"stock the shelf": [["spawn mid", "finish ok"]], "mid": [["spawn leaf", "finish ok-mid"]],
              "leaf": [GIVE_UP, GOOD]}
    tree, _, _ = await _run(script, BestOf(n=2, max_forks=cap))
    assert len(tree.fork_groups) == groups
    assert tree.counters.get("best_of_skipped_cap", 0) == skipped
    assert tree.counters.get("best_of_candidates", 0) == 2 * groups <= cap
    noted = [m for n in tree.nodes.values() for m in n.bounds_hit if "fork cap of" in m]
    assert len(noted) == skipped
    assert tree.root_success is True


async def test_the_fork_cap_is_per_rollout_and_a_launcher_serves_one_rollout_at_a_time():
    script = {"stock the shelf": [["spawn fill", "finish ok"]], "fill": [GIVE_UP, GOOD]}
    launcher = best_of_launcher(BestOf(n=2, max_forks=2), RubricOracle(VariantPolicy(script)), seed=1)
    first, _, _ = await _run(script, BestOf(n=2), launcher=launcher)
    second, _, _ = await _run(script, BestOf(n=2), launcher=launcher)
    assert len(first.fork_groups) == len(second.fork_groups) == 1
    with pytest.raises(RuntimeError, match="one root rollout at a time"):
        await asyncio.gather(_run(script, BestOf(n=2), launcher=launcher), _run(script, BestOf(n=2), launcher=launcher))


async def test_the_first_control_commits_the_first_and_calls_no_rubric():
    script = {"stock the shelf": [["spawn fill", "finish ok"]], "fill": [GIVE_UP, GOOD]}
    tree, world, _ = await _run(script, BestOf(n=2, selector="first"))
    (group,) = tree.fork_groups
    assert group.committed_branch == 0 and group.selection.startswith("first") and world.items == {}
    assert group.rubric_call is None and all(b.score_call is None for b in group.branches)
    assert "rubric_calls" not in tree.counters and "score_calls" not in tree.counters


async def test_the_random_control_is_seeded():
    script = {"stock the shelf": [["spawn fill", "finish ok"]], "fill": [GIVE_UP, GOOD, GIVE_UP]}

    async def chosen(seed):
        tree, _, _ = await _run(script, BestOf(n=3, selector="random"), seed=seed)
        return tree.fork_groups[0].committed_branch

    picks = [await chosen(seed) for seed in range(12)]
    assert picks == [await chosen(seed) for seed in range(12)]  # same seed, same draw
    assert set(picks) == {0, 1, 2}
    tree, _, _ = await _run(script, BestOf(n=3, selector="random"), seed=5)
    assert "rubric_calls" not in tree.counters


async def test_compute_is_recorded_in_the_tree_and_reported_against_the_committed_tree():
    script = {"stock the shelf": [["spawn mid", "finish ok"]], "mid": [["spawn leaf", "finish ok-mid"]],
              "leaf": [GIVE_UP, GOOD]}
    tree, _, agent = await _run(script, BestOf(n=2))
    c = tree.counters
    assert c["best_of_groups"] == 3 and c["world_clones"] == 3 * (2 + 1)
    assert c["rubric_calls"] == 3 and c["score_calls"] == 6 and c["rubric_completion_tokens"] > 0
    assert c["policy_calls"] == len(agent.calls)  # agent steps of every candidate, committed or not
    report = best_of_report(BestOf(n=2).record(), [tree])
    live = tree.live_nodes()
    assert report.committed.calls == sum(len(n.steps) for n in live.values()) == 2 + 2 + 2
    assert report.committed.calls + report.discarded.calls == c["policy_calls"]
    assert report.rubric.calls == 3 and report.score.calls == 6
    assert report.rubric.completion_tokens == c["rubric_completion_tokens"]
    assert report.score.completion_tokens > 0 and report.judge.calls == 0
    assert report.extra.calls == report.discarded.calls + 9
    assert report.extra_calls_ratio == pytest.approx((6 + report.extra.calls) / 6)
    assert report.groups == 3 and report.candidates == 6 and report.world_clones == 9
    # The two mid candidates are alike (a tie, the first kept); each leaf group's worker wins.
    assert report.selections == {"best": 2, "tie": 1} and report.committed_not_first == 2


def _judge_transport(requests: list[dict]):
    def handle(request):
        body = json.loads(request.content)
        requests.append(body)
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        text = write_rubric(user) if RUBRIC_WRITER_MARKER in system else score_trajectory(user)
        assert RUBRIC_WRITER_MARKER in system or RUBRIC_SCORER_MARKER in system
        return httpx2.Response(200, json={
            "id": "j", "object": "chat.completion", "created": 0, "model": "judge",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        })
    return httpx2.MockTransport(handle)


async def test_the_judge_selector_writes_and_scores_with_the_external_model():
    requests: list[dict] = []
    judge = JudgeClient("http://judge.test/v1", "judge", http_client=httpx2.AsyncClient(transport=_judge_transport(requests)),
                        max_retries=0, temperature=0.0)
    script = {"stock the shelf": [["spawn fill", "finish ok"]], "fill": [GIVE_UP, GOOD]}
    settings = BestOf(n=2, selector="judge", judge_model="judge")
    agent = VariantPolicy(script)  # no rubric oracle: the policy is never asked to write or score
    world = Shelf()
    tree = await run_rollout(TASK, agent, lambda h: ShelfEnv(h, world), CONFIG, seed=7,
                             launcher=best_of_launcher(settings, agent, judge=judge, seed=7))
    (group,) = tree.fork_groups
    assert group.committed_branch == 1 and world.items == {"a": 1}
    assert group.rubric_call.external and all(b.score_call.external for b in group.branches)
    assert len(requests) == 3 == tree.counters["judge_calls"]
    assert tree.counters["judge_prompt_tokens"] == 300 and "rubric_calls" not in tree.counters
    report = best_of_report(settings.record(), [tree])
    assert report.judge.calls == 3 and report.rubric.calls == report.score.calls == 0
    assert report.settings["judge_model"] == "judge"


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="N >= 2"):
        BestOf(n=1)
    with pytest.raises(ValueError, match="unknown selector 'best'"):
        BestOf(n=2, selector="best")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs the policy"):
        best_of_launcher(BestOf(n=2))
    with pytest.raises(ValueError, match="needs an external judge"):
        best_of_launcher(BestOf(n=2, selector="judge"))


# -- the command line and the harness, both environments ------------------------------------------

cli = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--best-of", "2"], "--best-of with --selector self needs a policy that writes and scores rubrics"),
        (["--best-of", "0"], "--best-of must be at least 1"),
        (["--best-of", "2", "--selector", "judge"], "--selector judge needs the external model's endpoint"),
        (["--best-of", "2", "--selector", "best"], "unknown --selector 'best'; known: self, judge, first, random"),
    ],
)
def test_the_command_line_refuses_bad_best_of_input_in_one_line(tmp_path, args, message):
    result = cli.invoke(app, ["eval", "--out", str(tmp_path / "o"), "--limit", "1", "--no-progress", *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "o" / "run.json").exists()


def test_the_command_line_records_best_of_in_run_json_and_summary(tmp_path):
    out = tmp_path / "run"
    args = ["eval", "--out", str(out), "--task-id", "textcraft_synth.val.3", "--no-progress",
            "--best-of", "2", "--selector", "first", "--max-forks", "4"]
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "best-of-2 (first" in result.output and "extra compute" in result.output
    run = json.loads((out / "run.json").read_text())
    assert run["best_of"] == {"n": 2, "selector": "first", "max_forks": 4, "temperature": 1.0}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best_of"]["settings"] == run["best_of"] and summary["best_of"]["groups"] >= 1
    assert summary["overall"]["successes"] == 1
    # Another N is another experiment: resuming into the same folder is refused.
    other = cli.invoke(app, [*args[:-6], "--best-of", "3", "--selector", "first", "--max-forks", "4"])
    assert other.exit_code == 2 and "best_of" in " ".join(other.output.split())


@pytest.mark.parametrize("env_name", ["textcraft-synth", "textworld-sync"])
async def test_end_to_end_through_the_harness(env_name, tmp_path):
    spec = get_env(env_name)
    split = "val" if env_name == "textcraft-synth" else "test"
    pool = spec.load_split(split)
    tasks = [next(t for t in pool if t.id == "textcraft_synth.val.3")] if env_name == "textcraft-synth" else \
        [next(t for t in pool if t.difficulty == "easy")]
    protocol = "codeact" if env_name == "textcraft-synth" else "text"
    policy = RubricOracle(SabotagedPolicy(spec.oracle(tasks), rate=0.5, seed=0, protocol=protocol))
    settings = BestOf(n=2)
    summary = await evaluate(
        tasks, policy, spec.root_env, tmp_path / "run", env_name=spec.name, split=split, policy_name="scripted",
        config=RuntimeConfig(sampling=spec.sampling), show_progress=False,
        launcher=lambda seed: best_of_launcher(settings, policy, seed=seed), best_of=settings.record(),
    )
    report = summary.best_of
    assert report is not None and report.groups >= 1 and report.candidates == 2 * report.groups
    assert report.rubric.calls == report.groups and report.score.calls == 2 * report.groups
    assert summary.counters["world_clones"] == 3 * report.groups
    (tree_file,) = (tmp_path / "run" / "rollouts").glob("*/*.json")
    from sera.types import RolloutTree

    tree = RolloutTree.from_json(tree_file.read_text())
    assert all(g.kind == "best_of" and g.committed_branch is not None for g in tree.fork_groups)
    for group in tree.fork_groups:  # a worker beats a giver-up whenever the group is mixed
        scores = [b.rubric_score for b in group.branches]
        assert scores[group.committed_branch] == max(s for s in scores if s is not None)
    for node in tree.nodes.values():  # no selection machinery reaches any agent
        for message in node.messages:
            assert not any(w in message.content.lower() for w in MACHINERY_WORDS), (node.id, message.content[:200])
    assert json.loads((tmp_path / "run" / "run.json").read_text())["best_of"]["n"] == 2
