"""Write the one self-contained HTML page of `sera view`.

The page is `assets/viewer.html` with the stylesheet and script inlined and the data embedded
as JSON blocks (`<script type="application/json">`): one block per tree, which the script
parses only when that tree is opened, and one for the index. In each block every `<`, `>` and
`&` is written as a `\\u00XX` escape, so no model text can end the block or start markup; the
script puts text into the page with `textContent` only. Trees are read and written one at a
time, so a large run never sits in memory whole.
"""

from __future__ import annotations

import base64
import hashlib
import html
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from sera.view.build import tree_view
from sera.view.records import EntryView, PageView, TreeView
from sera.view.sources import RunFolder, TreeFile, ViewError, read_tree, scan_folder

DEFAULT_MAX_MB = 256
"""Trees past this much embedded data are listed in the index but not embedded: a browser
page much larger than this is slow to open."""
DIR_OUTPUT = "view.html"
"""The page's name inside a viewed folder when `-o` is not given."""
_SLOT = re.compile(r"__(TITLE|STYLE|SCRIPT_HASH|SCRIPT)__")
_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


@dataclass
class ViewResult:
    """What `write_view` wrote."""

    path: Path
    """The HTML file."""
    trees: int = 0
    """Trees embedded."""
    unreadable: list[str] = field(default_factory=list)
    """One line per file that could not be read as a tree."""
    skipped: int = 0
    """Readable trees left out by the size limit."""
    size: int = 0
    """Bytes written."""


def default_output(source: Path) -> Path:
    """`X.html` beside a tree file `X.json`; `view.html` inside a folder."""
    return source / DIR_OUTPUT if source.is_dir() else source.with_suffix(".html")


def embed_json(text: str) -> str:
    """JSON text made safe inside `<script type="application/json">` (the escapes are valid
    JSON string escapes, and `<`, `>`, `&` occur in JSON only inside strings)."""
    return text.translate(_ESCAPES)


def write_view(source: Path, output: Path | None = None, *, max_mb: float = DEFAULT_MAX_MB) -> ViewResult:
    """Write the page for a tree file or a run directory; one-line `ViewError` on bad input."""
    output = output or default_output(source)
    if output.is_dir():
        raise ViewError(f"-o {output} is a folder; give the .html file to write")
    if output.exists() and source.exists() and output.resolve() == source.resolve():
        raise ViewError(f"-o {output} is the file being viewed; give another .html file")
    if source.is_file():
        folder = RunFolder(kind="tree", run_info={}, files=[TreeFile(source, source.name, None, None)])
    else:
        folder = scan_folder(source)
    title = _title(source, folder)
    head, tail = _template(title)
    result = ViewResult(path=output)
    entries: list[EntryView] = []
    budget = max_mb * 2**20
    partial = output.with_name(f"{output.name}.partial")
    try:
        with partial.open("w", encoding="utf-8") as out:
            written = out.write(head)
            for tree_file in folder.files:
                entry, block = _entry(tree_file, result.trees)
                if entry.unreadable and folder.kind == "tree":
                    raise ViewError(entry.unreadable)  # one bad file given alone is an error, not a page
                if block is not None and written + len(block) > budget:
                    entry.block, block = None, None
                    entry.skipped = f"not embedded: the page reached its size limit ({max_mb:g} MB)"
                    result.skipped += 1
                if block is not None:
                    written += out.write(f'<script type="application/json" id="sera-tree-{result.trees}">{block}</script>\n')
                    result.trees += 1
                if entry.unreadable:
                    result.unreadable.append(entry.unreadable)
                entries.append(entry)
            if not result.trees:
                raise ViewError(f"{source}: no readable rollout tree ({result.unreadable[0] if result.unreadable else 'none embedded'})")
            page = PageView(title=title, source=str(source), kind=folder.kind,
                            run_info=folder.run_info, entries=entries)
            written += out.write(f'<script type="application/json" id="sera-page">{embed_json(page.model_dump_json())}</script>\n')
            written += out.write(tail)
        os.replace(partial, output)
    except OSError as exc:
        raise ViewError(f"{output}: cannot be written ({exc.strerror or exc})") from None
    finally:
        partial.unlink(missing_ok=True)
    result.size = output.stat().st_size
    return result


def _entry(tree_file: TreeFile, block_index: int) -> tuple[EntryView, str | None]:
    """The index row of a file and its embedded block (None when unreadable)."""
    entry = EntryView(path=tree_file.rel, step=tree_file.step, sample=tree_file.sample)
    try:
        tree = read_tree(tree_file.path)
        view = tree_view(tree)
    except ViewError as exc:
        entry.unreadable = str(exc)
        return entry, None
    except ValueError as exc:  # broken node links: the tree cannot be drawn
        entry.unreadable = f"{tree_file.path}: broken tree: {str(exc).splitlines()[0]}"
        return entry, None
    _summarise(entry, view)
    entry.block = block_index
    return entry, embed_json(view.model_dump_json())


def _summarise(entry: EntryView, view: TreeView) -> None:
    root = next(n for n in view.nodes if n.id == view.root_id)
    entry.task_id, entry.seed, entry.success = view.task_id, view.seed, view.root_success
    entry.error = view.error or root.error
    entry.goal = root.goal
    entry.agents = len(view.nodes)
    entry.depth = view.depth
    entry.policy_calls = sum(len(n.steps) for n in view.nodes)
    entry.tokens = sum(n.prompt_tokens + n.completion_tokens + n.call_tokens for n in view.nodes)
    entry.wall_time_s = view.wall_time_s
    entry.fork_groups = len(view.groups)


def _title(source: Path, folder: RunFolder) -> str:
    if folder.kind == "tree":
        return f"{source.parent.name}/{source.name}" if source.parent.name else source.name
    return source.resolve().name or str(source)


def _template(title: str) -> tuple[str, str]:
    """The page around the data blocks: (everything before them, everything after), with the
    title, stylesheet and script filled in (one pass: nothing inserted is substituted again)."""
    assets = resources.files("sera.view") / "assets"
    style = (assets / "viewer.css").read_text(encoding="utf-8")
    script = (assets / "viewer.js").read_text(encoding="utf-8")
    if "</script" in script.lower() or "</style" in style.lower():
        raise RuntimeError("viewer assets must not contain </script or </style")  # would end the inline block
    template = (assets / "viewer.html").read_text(encoding="utf-8")
    # The page allows only this exact script to run (its hash in the CSP), and no network at all.
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    fills = {"STYLE": style, "SCRIPT": script, "SCRIPT_HASH": f"sha256-{digest}", "TITLE": html.escape(title)}
    before, after = template.split("__DATA__")
    return _SLOT.sub(lambda m: fills[m.group(1)], before), _SLOT.sub(lambda m: fills[m.group(1)], after)
