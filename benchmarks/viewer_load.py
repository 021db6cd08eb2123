"""`sera view` on large trees: page size, write time and load time in headless Chromium.

For each run directory given, the largest tree file (by bytes) is written as its own page and
opened in headless Chromium (Debian's chromium, driven by playwright) `--loads` times: the load
time is the page's own clock from navigation start to the tree drawn (root row and its
children), the median is reported. On the loaded page it then times "expand all" (every row
drawn) and opening every agent's details (all steps, i.e. all the tree's text, in the DOM). The
whole run as one page is measured the same way, plus the time to open its largest tree from
the index. A synthetic tree (300 agents by default, 10 steps each, 2,000-character texts: ~20 MB
of JSON) stands in for the large trees a model makes. Prints one JSON object.

Usage (oracle runs; the largest TextCraft trees come from deep recipes):
    sera eval --env textcraft-synth --split val --policy oracle --limit 64 --out runs/tc64
    sera eval --env textworld-sync --split test --policy oracle --out runs/tw-test
    python benchmarks/viewer_load.py runs/tc64 runs/tw-test [--loads 5] [--synthetic 300]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from sera.types import Action, AgentNode, RolloutTree, Step, Usage
from sera.view import write_view
from sera.view.sources import scan_folder

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
         "--disable-background-networking", "--disable-component-update"]
EXPAND_AND_OPEN_ALL = """() => {
  const t0 = performance.now();
  [...document.querySelectorAll('.tree-view .tools button')].find(b => b.textContent === 'expand all').click();
  document.body.getBoundingClientRect();
  const t1 = performance.now();
  document.querySelectorAll('.tree-view .node > .row').forEach(r => r.click());
  document.body.getBoundingClientRect();
  const t2 = performance.now();
  return {rows: document.querySelectorAll('.tree-view .node').length, steps: document.querySelectorAll('.step').length,
          expand_all_ms: t1 - t0, open_all_details_ms: t2 - t1};
}"""


def _load(browser, page_path: Path, loads: int, ready: str) -> tuple[list[float], object]:
    times, page = [], None
    for _ in range(loads):
        if page is not None:
            page.close()
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(page_path.as_uri())
        page.wait_for_selector(f"body[{ready}]")
        times.append(float(page.evaluate(f"() => document.body.dataset.{'renderedMs' if 'rendered' in ready else 'readyMs'}")))
    return times, page


def synthetic_tree(agents: int, steps: int, text_chars: int) -> RolloutTree:
    """A tree bigger than the oracle makes: `agents` agents (each parent launches 4 in its
    middle step, breadth first), `steps` steps each, every thought, code cell and observation
    `text_chars` long."""
    text = ('R t3_i2_13 2 2 t8_i1*2 {"raw_t1": 14, "raw_t0": 15}\n' * (text_chars // 50 + 1))[:text_chars]
    nodes: dict[str, AgentNode] = {}
    for i in range(agents):
        parent = None if i == 0 else f"n{(i - 1) // 4}"
        kids = [f"n{c}" for c in range(4 * i + 1, min(4 * i + 5, agents))]
        nodes[f"n{i}"] = AgentNode(
            id=f"n{i}", parent_id=parent, fork_step=None if parent is None else steps // 2,
            depth=0 if parent is None else nodes[parent].depth + 1, goal=f"Synthetic goal {i}: {text[:80]}", budget=steps,
            verified_success=i % 3 != 0, steps=[
                Step(index=k, prompt_len=2 + 2 * k, completion_text="", observation=text,
                     action=Action(kind="code", thought=text, body=text),
                     child_ids=kids if k == steps // 2 else [], usage=Usage(prompt_tokens=900, completion_tokens=120))
                for k in range(steps)
            ])
    return RolloutTree(task_id="synthetic.0", env="textcraft-synth", root_id="n0", nodes=nodes, root_success=True)


def measure_tree(browser, tree_path: Path, out: Path, loads: int) -> dict:
    """Write one tree's page and load it."""
    start = time.perf_counter()
    written = write_view(tree_path, out / "tree.html")
    result = {"html_bytes": written.size, "write_s": round(time.perf_counter() - start, 3)}
    times, page = _load(browser, out / "tree.html", loads, "data-rendered-ms")
    result["load_to_rendered_tree_ms"] = {"median": statistics.median(times), "all": times}
    result.update(page.evaluate(EXPAND_AND_OPEN_ALL))
    page.close()
    return result


def measure(browser, run: Path, out: Path, loads: int) -> dict:
    files = scan_folder(run).files
    largest = max(files, key=lambda f: f.path.stat().st_size)
    result: dict = {"run": str(run), "trees": len(files), "largest_tree": largest.rel,
                    "tree_json_bytes": largest.path.stat().st_size}
    result["tree_page"] = measure_tree(browser, largest.path, out, loads)

    start = time.perf_counter()
    written = write_view(run, out / "run.html")
    result["run_page"] = {"html_bytes": written.size, "write_s": round(time.perf_counter() - start, 3),
                          "unreadable": len(written.unreadable)}
    times, page = _load(browser, out / "run.html", loads, "data-ready")
    index = [f.rel for f in files].index(largest.rel)
    open_ms = page.evaluate("""(i) => { const t0 = performance.now();
        document.querySelectorAll('table.index tbody tr')[i].click(); document.body.getBoundingClientRect();
        return performance.now() - t0; }""", index)
    result["run_page"]["load_to_index_ms"] = {"median": statistics.median(times), "all": times}
    result["run_page"]["open_largest_tree_ms"] = open_ms
    page.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="Run directories (evaluation or training).")
    parser.add_argument("--loads", type=int, default=5, help="Page loads per measurement (median reported).")
    parser.add_argument("--chromium", default=shutil.which("chromium"), help="The browser binary.")
    parser.add_argument("--synthetic", type=int, default=300, help="Also a synthetic tree of this many agents (0: none).")
    parser.add_argument("--synthetic-steps", type=int, default=10, help="Steps per synthetic agent.")
    parser.add_argument("--synthetic-chars", type=int, default=2000, help="Length of each synthetic text.")
    args = parser.parse_args()
    if not args.chromium:
        raise SystemExit("chromium not found: apt-get install chromium (or bash scripts/ensure_chromium.sh)")
    from playwright.sync_api import sync_playwright

    results = []
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as tmp:
        browser = playwright.chromium.launch(executable_path=args.chromium, headless=True, args=FLAGS)
        version = browser.version
        for run in args.runs:
            out = Path(tmp) / run.name
            out.mkdir()
            results.append(measure(browser, run, out, args.loads))
        if args.synthetic:
            tree_path = Path(tmp) / "synthetic.json"
            tree_path.write_text(synthetic_tree(args.synthetic, args.synthetic_steps, args.synthetic_chars).to_json())
            results.append({"synthetic": {"agents": args.synthetic, "steps_per_agent": args.synthetic_steps,
                                          "chars_per_text": args.synthetic_chars},
                            "tree_json_bytes": tree_path.stat().st_size,
                            "tree_page": measure_tree(browser, tree_path, Path(tmp), args.loads)})
        browser.close()
    print(json.dumps({"chromium": version, "loads": args.loads, "results": results}, indent=2))


if __name__ == "__main__":
    main()
