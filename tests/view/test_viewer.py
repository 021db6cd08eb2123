"""`sera view`: the page's data, its escaping, bad input, and the page itself in headless Chromium."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sera.cli import app
from sera.types import Action, AgentNode, ForkBranch, ForkGroup, ModelCall, RolloutTree, Step, Usage
from sera.view import ViewError, write_view
from sera.view.build import tree_view

EVIL = "</script><script>alert(1)</script>"
RUBRIC = {
    "rubric_items": [
        {"name": "goal completed", "weight": 0.6, "description": "The planks exist.", "score_0": "none", "score_full": "all"},
        {"name": "efficiency", "weight": 0.4, "description": "Few steps.", "score_0": "many", "score_full": "one"},
    ],
    "success_gate": "The planks are in the inventory.",
    "failure_conditions": ["it stops on an error"],
    "scoring_procedure": "Gate first, then the weighted sum.",
}
CHROMIUM = os.environ.get("SERA_CHROMIUM") or shutil.which("chromium")
# Headless on a machine with no network: without these Chromium keeps trying to reach its servers.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                  "--disable-background-networking", "--disable-component-update"]


def _step(index: int, body: str, observation: str, child_ids: tuple[str, ...] = ()) -> Step:
    return Step(index=index, prompt_len=2 + 2 * index, completion_text=f"<thought>t{index}</thought><python>{body}</python>",
                action=Action(kind="code", thought=f"thinking about step {index}", body=body), observation=observation,
                child_ids=list(child_ids), usage=Usage(prompt_tokens=100, completion_tokens=20), policy_s=0.25, env_s=0.5)


def _score_call(scores: dict[str, float], success: bool = True) -> ModelCall:
    reply = {"success": success, "criterion_scores": [{"name": k, "score": v} for k, v in scores.items()], "reason": "seen"}
    return ModelCall(role="score", prompt_messages=[], completion_text=json.dumps(reply), usage=Usage(completion_tokens=30))


def make_tree() -> RolloutTree:
    """A root that delegates once with a frozen rubric (child n1, scored) and forks a
    counterfactual group g0 (branch n2 committed, n3 not, n3's own child n4 dead with it)."""
    root = AgentNode(id="n0", goal=f"Craft 4x planks {EVIL}", budget=20, steps=[
        _step(0, "print(view_inventory())", "[Cell 0 Output]\n{'log': 1} <img src=x onerror=alert(2)>"),
        _step(1, "await launch_subagent({'planks': 4})", "Crafted 4x planks.", ("n1", "n2", "n3")),
        _step(2, "finish('done')", "Finished."),
    ], finish_message="done", verified_success=True, started_at=1.0, ended_at=3.5)
    child = AgentNode(id="n1", parent_id="n0", fork_step=1, depth=1, goal="Craft 4x planks from logs", budget=10,
                      steps=[_step(0, "craft({'log': 1}, ('planks', 4))", "Crafted 4x planks.")], finish_message="ok",
                      verified_success=True, rubric=RUBRIC, rubric_hash="ab" * 32, rubric_score=0.88,
                      rubric_assessment={"success": True, "criterion_scores": {"goal completed": 1.0, "efficiency": 0.7},
                                         "model_final": 0.9, "reason": "planks seen"}, score_call=_score_call({}))
    branches = [
        AgentNode(id="n2", parent_id="n0", fork_step=1, depth=1, goal="Craft 1x stick", budget=10, fork_group_id="g0",
                  branch_index=0, verified_success=True, steps=[_step(0, "craft({'planks': 2}, ('stick', 1))", "Crafted.")]),
        AgentNode(id="n3", parent_id="n0", fork_step=1, depth=1, goal="Craft 1x stick", budget=10, fork_group_id="g0",
                  branch_index=1, verified_success=False, error="budget exhausted",
                  steps=[_step(0, "await launch_subagent({'stick': 1})", "nothing", ("n4",))]),
        AgentNode(id="n4", parent_id="n3", fork_step=0, depth=2, goal="Find a stick in the dead branch", budget=5,
                  steps=[_step(0, "view_inventory()", "{}")]),
    ]
    group = ForkGroup(id="g0", parent_id="n0", parent_step=1, child_goal="Craft 1x stick", committed_branch=0,
                      rubric=RUBRIC, rubric_hash="cd" * 32, branches=[
                          ForkBranch(index=0, node_id="n2", label=True, label_source="verifier", rubric_score=0.76,
                                     score_call=_score_call({"goal completed": 1.0, "efficiency": 0.4})),
                          ForkBranch(index=1, node_id="n3", label=False, label_source="verifier", rubric_score=0.0,
                                     score_call=_score_call({"goal completed": 0.0, "efficiency": 0.1}, success=False)),
                      ])
    nodes = {n.id: n for n in [root, child, *branches]}
    return RolloutTree(task_id="toy.0", env="textcraft-synth", root_id="n0", nodes=nodes, seed=7, fork_groups=[group],
                       root_success=True, wall_time_s=2.5, counters={"agents": 5, "policy_calls": 7})


@pytest.fixture
def tree_file(tmp_path: Path) -> Path:
    path = tmp_path / "toy.json"
    path.write_text(make_tree().to_json(), encoding="utf-8")
    return path


def _blocks(page: str) -> dict[str, str]:
    return dict(re.findall(r'<script type="application/json" id="([^"]+)">(.*?)</script>', page, re.DOTALL))


# -- the view model and the page's text ------------------------------------------------------------


def test_the_view_model_attaches_scores_and_marks_uncommitted_branches():
    view = tree_view(make_tree())
    nodes = {n.id: n for n in view.nodes}
    assert [c.score for c in nodes["n1"].rubric.criteria] == [1.0, 0.7]
    assert nodes["n1"].assessment.gate is True and nodes["n1"].assessment.score == 0.88
    assert (nodes["n2"].live, nodes["n2"].committed) == (True, True)
    assert (nodes["n3"].live, nodes["n3"].committed, nodes["n4"].live) == (False, False, False)
    assert [c.score for c in nodes["n3"].rubric.criteria] == [0.0, 0.1]  # its group's rubric, its own scores
    (group,) = view.groups
    assert [(b.committed, b.criterion_scores, b.assessment.gate) for b in group.branches] == [
        (True, {"goal completed": 1.0, "efficiency": 0.4}, True), (False, {"goal completed": 0.0, "efficiency": 0.1}, False)]
    assert view.nodes[0].steps[1].group_ids == ["g0"] and view.live_agents == 3
    assert nodes["n0"].prompt_tokens == 300 and nodes["n0"].wall_s == 2.5


def test_model_text_cannot_close_the_data_block(tree_file, tmp_path):
    out = tmp_path / "page.html"
    write_view(tree_file, out)
    page = out.read_text(encoding="utf-8")
    assert EVIL not in page and "<img src=x" not in page
    # Only the page's own script tags: two data blocks and the viewer's script.
    assert page.count("<script") == 3 and page.count("</script>") == 3
    blocks = _blocks(page)
    tree = json.loads(blocks["sera-tree-0"])  # the escapes are plain JSON: the text comes back exactly
    assert tree["nodes"][0]["goal"] == f"Craft 4x planks {EVIL}"
    assert json.loads(blocks["sera-page"])["entries"][0]["goal"] == tree["nodes"][0]["goal"]
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page  # nothing fetched


def test_the_script_never_writes_markup():
    script = (Path(__file__).parents[2] / "src/sera/view/assets/viewer.js").read_text(encoding="utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script


# -- bad input -------------------------------------------------------------------------------------


def test_a_partial_tree_file_is_a_one_line_error_naming_it(tree_file):
    tree_file.write_text(tree_file.read_text()[:500], encoding="utf-8")
    with pytest.raises(ViewError) as caught:
        write_view(tree_file)
    assert str(caught.value).startswith(f"{tree_file}: not a readable rollout tree") and "\n" not in str(caught.value)
    result = CliRunner().invoke(app, ["view", str(tree_file)])
    assert result.exit_code == 2 and "not a readable rollout tree" in result.output
    assert not tree_file.with_suffix(".html").exists()


def test_a_folder_without_trees_is_an_error(tmp_path):
    (tmp_path / "run.json").write_text("{}")
    with pytest.raises(ViewError, match="no rollout trees"):
        write_view(tmp_path)


def test_a_corrupt_tree_in_a_run_is_listed_and_the_rest_renders(tmp_path):
    run = tmp_path / "run"
    for task in ("toy.0", "toy.2", "toy.10"):
        (run / "rollouts" / task).mkdir(parents=True)
        (run / "rollouts" / task / "0.json").write_text(make_tree().model_copy(update={"task_id": task}).to_json())
    (run / "rollouts" / "toy.2" / "0.json").write_text('{"task_id": "toy.2", "nodes": {')
    (run / "run.json").write_text(json.dumps({"env": "textcraft-synth", "policy": "oracle", "sampling": {"temperature": 0}}))
    result = CliRunner().invoke(app, ["view", str(run)])
    assert result.exit_code == 1, result.output
    assert f"unreadable: {run / 'rollouts/toy.2/0.json'}: not a readable rollout tree" in result.output
    page = json.loads(_blocks((run / "view.html").read_text())["sera-page"])
    assert page["kind"] == "eval" and page["run_info"]["sampling.temperature"] == 0
    assert [(e["path"], e["block"], bool(e["unreadable"])) for e in page["entries"]] == [
        ("rollouts/toy.0/0.json", 0, False), ("rollouts/toy.2/0.json", None, True), ("rollouts/toy.10/0.json", 1, False)]


def test_a_tree_with_a_parent_cycle_is_unreadable_not_drawn(tmp_path):
    tree = make_tree()
    tree.nodes["n1"].parent_id, tree.nodes["n1"].fork_step = "n4", 0
    tree.nodes["n4"].parent_id = "n1"  # n1 -> n4 -> n1: never reaches the root
    (tmp_path / "a.json").write_text(make_tree().to_json())
    (tmp_path / "b.json").write_text(tree.to_json())
    result = write_view(tmp_path, tmp_path / "v.html")
    assert result.trees == 1 and result.unreadable == [f"{tmp_path / 'b.json'}: broken tree: node 'n1' is not connected to the root 'n0'"]


def test_trees_past_the_size_limit_are_listed_not_embedded(tmp_path):
    for k in range(3):
        (tmp_path / f"toy.{k}.json").write_text(make_tree().to_json())
    result = write_view(tmp_path, tmp_path / "v.html", max_mb=0.02)
    assert (result.trees, result.skipped) == (1, 2)
    entries = json.loads(_blocks((tmp_path / "v.html").read_text())["sera-page"])["entries"]
    assert [e["block"] for e in entries] == [0, None, None] and "size limit" in entries[2]["skipped"]


# -- the page in headless Chromium ----------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; `make setup` does it as root)")
    from playwright.sync_api import sync_playwright  # the `test` extra; it never downloads a browser here

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


def _open(browser, path: Path):
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"script error: {exc}"))
    page.on("dialog", lambda dialog: (problems.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    page.on("request", lambda request: None if request.url.startswith(("file:", "data:", "about:")) else problems.append(request.url))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    return page, problems


def test_the_page_renders_expands_and_keeps_model_text_inert(browser, tree_file, tmp_path):
    out = tmp_path / "page.html"
    write_view(tree_file, out)
    page, problems = _open(browser, out)
    try:
        root = page.locator(".node[data-id='n0'] > .row")
        assert EVIL in root.locator(".goal").text_content()  # shown as text, not run
        assert page.locator(".node[data-id='n1'] > .row").is_visible()  # the root's children start open
        assert page.locator(".node[data-id='n3']").evaluate("e => e.classList.contains('dead')")
        assert "uncommitted branch 1 of g0" in page.locator(".node[data-id='n3'] > .row").text_content()
        assert page.locator(".node[data-id='n0'] > .detail .step").count() == 0  # details are built on expand
        root.click()
        steps = page.locator(".node[data-id='n0'] > .detail .step")
        assert steps.count() == 3 and steps.nth(0).is_visible()
        assert "onerror=alert(2)" in steps.nth(0).locator("pre.obs").text_content()
        group = page.locator(".node[data-id='n0'] > .detail .group[data-group='g0']")
        rows = group.locator("table.branches tr")
        assert rows.count() == 3 and "committed" in rows.nth(1).text_content() and "uncommitted" in rows.nth(2).text_content()
        page.locator(".node[data-id='n1'] > .row").click()
        rubric = page.locator(".node[data-id='n1'] > .detail table.rubric")
        assert rubric.is_visible() and "goal completed" in rubric.text_content() and "0.7" in rubric.text_content()
        assert "passed" in page.locator(".node[data-id='n1'] > .detail .rubric-box").text_content()
        page.fill("#goal-search", "dead branch")  # n4 is not rendered yet: the search reveals it
        page.wait_for_selector(".node[data-id='n4'].hit")
        assert page.locator(".node[data-id='n1']").is_hidden() and page.locator(".node[data-id='n4'] > .row").is_visible()
        shot = tmp_path / "page.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
        assert problems == []
    finally:
        page.close()


def test_a_run_page_indexes_its_trees_and_opens_one(browser, tmp_path):
    from sera.envs.registry import get_env
    from sera.launchers.counterfactual import CounterfactualLauncher
    from sera.launchers.labels import VerifierLabeler
    from sera.launchers.rubric_calls import PolicyRubricScorer, PolicyRubricWriter
    from sera.runtime.config import RuntimeConfig
    from sera.runtime.rollout import run_rollout
    from sera.rubric.scripted import RubricOracle

    env = get_env("textcraft-synth")
    task = next(t for t in env.load_split("val") if t.id == "textcraft_synth.val.5")
    policy = RubricOracle(env.oracle([task]))
    launcher = CounterfactualLauncher(PolicyRubricWriter(policy), PolicyRubricScorer(policy), VerifierLabeler())
    rollout = run_rollout(task, policy, env.root_env(task), RuntimeConfig(sampling=env.sampling), launcher=launcher)
    with ThreadPoolExecutor(1) as pool:  # playwright's sync API holds this thread's event loop
        tree = pool.submit(asyncio.run, rollout).result()
    step = tmp_path / "run" / "rollouts" / "step_00003"
    step.mkdir(parents=True)
    (step / "textcraft_synth.val.5.0.json").write_text(tree.to_json())
    (step / "textcraft_synth.val.5.1.json").write_text("not json")
    write_view(tmp_path / "run", tmp_path / "run.html")
    page, problems = _open(browser, tmp_path / "run.html")
    try:
        assert page.locator("table.index tr.unreadable").count() == 1
        entry = page.locator("table.index tr.entry")
        assert entry.count() == 1 and "textcraft_synth.val.5" in entry.text_content()
        entry.click()
        page.wait_for_selector(".tree-view .node[data-id='n0']")
        page.locator(".node[data-id='n0'] > .row").click()
        assert page.locator(".node[data-id='n0'] > .detail .group").count() == len(tree.fork_groups) > 0
        assert page.locator(".node.dead").count() > 0
        assert problems == []
    finally:
        page.close()
