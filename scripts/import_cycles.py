"""List import cycles among the modules of src/sera and the package-level import graph, and check
the layering rules; exits 1 when one is broken (run by `.ci/run`).

Every import statement counts, including function-local and TYPE_CHECKING ones: a cycle that
only type checkers see is still a circle a reader has to untangle. Rules:
- no cycles;
- nothing outside `sera.testing` imports `sera.testing` (the test kit is for tests, benchmarks
  and docs; the library reaches its tiny model by name, `sera.policy.model_registry`);
- only the layers above the trainer (`TRAIN_USERS`) import `sera.train`; an arrow from a lower
  layer into it runs back up. `KNOWN_UPWARD` lists the ones main still has, so that no new one
  can land; remove an entry when its arrow is gone;
- `sera.serving` (the sampler backends, weight sync, the vLLM server) builds only on
  `SERVING_BASE`: the trainer passes it plain values (`sera.train.sampler_setup`).

    python scripts/import_cycles.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


TRAIN_USERS = ("sera.cli", "sera.commands", "sera.pipeline", "sera.train")
"""Packages that may import `sera.train` (the trainer and what drives it)."""
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()
"""Arrows into `sera.train` from a lower layer that main still has (debt, not permission)."""
SERVING_BASE = ("sera.policy", "sera.runtime", "sera.types", "sera.serving")
"""The only packages `sera.serving` imports from `sera`."""


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """One line per import that breaks a layering rule (module docstring)."""
    found = []
    for source in sorted(graph):
        for target in sorted(graph[source]):
            if _within(target, "sera.testing") and not _within(source, "sera.testing"):
                found.append(f"{source} imports the test kit ({target})")
            elif (_within(target, "sera.train") and not any(_within(source, p) for p in TRAIN_USERS)
                  and (source, target) not in KNOWN_UPWARD):
                found.append(f"{source} imports {target}: a lower layer reaching up into the trainer")
            elif (_within(source, "sera.serving") and _within(target, "sera")
                  and not any(_within(target, p) for p in SERVING_BASE)):
                found.append(f"{source} imports {target}: serving builds only on {', '.join(SERVING_BASE[:3])}")
    return found


def modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [base, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in mods and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main() -> None:
    mods = modules()
    graph = import_graph(mods)
    found = cycles(graph)
    print(f"{len(mods)} modules, {sum(map(len, graph.values()))} import edges, {len(found)} cycles")
    for component in found:
        print("  cycle:", " <-> ".join(component))
    top = lambda m: ".".join(m.split(".")[:2])  # noqa: E731
    packages: dict[str, set[str]] = {}
    for source, targets in graph.items():
        for target in targets:
            if top(source) != top(target):
                packages.setdefault(top(source), set()).add(top(target))
    for package in sorted(packages):
        print(f"  {package} -> {', '.join(sorted(packages[package]))}")
    violations = layer_violations(graph)
    known = sorted(edge for edge in KNOWN_UPWARD if edge[1] in graph.get(edge[0], set()))
    print(f"{len(violations)} layering violations; {len(known)} known arrows back up into sera.train")
    for line in violations:
        print("  violation:", line)
    if found or violations:
        sys.exit(1)


if __name__ == "__main__":
    main()
