"""Language policy: what a cell may say, decided from its AST before anything runs.

This is the first of two layers (the second is the worker process: rlimits, no privileges, no
files, no network). It blocks the known routes from plain Python to the interpreter's internals:

- imports outside `ALLOWED_MODULES` (and relative or submodule imports);
- dunder names (`__builtins__`, `__import__`, ...) and any attribute starting with `_`
  (reading `__name__`, `__qualname__` and `__doc__` excepted);
- the frame / generator / coroutine / traceback / code attributes (`gi_frame`, `f_back`,
  `tb_frame`, `co_code`, ...) that walk from an object to a frame and its globals;
- `str.format` / `format_map`, whose `{0.attr}` fields read attributes by string (only
  `"literal".format(...)` with plain fields is allowed);
- the task/future methods that reach the event loop or frames (`get_loop`, `get_coro`, ...);
- calls of builtins the sandbox does not provide (`open`, `eval`, `exec`, ...);
- a call to an async tool (by default `launch_subagent`) that is not awaited.

`check_code` is the whole policy; `checked_tree` returns the parsed tree for the worker.
The same name rule (`is_blocked_attribute`) guards the runtime routes that take names as
strings (`getattr`, `operator.attrgetter`, ...), see `safe_builtins`.
"""

from __future__ import annotations

import ast
import string
import warnings

ALLOWED_MODULES = frozenset(
    {
        "math", "itertools", "collections", "json", "re", "functools", "operator", "statistics",
        "string", "random", "heapq", "bisect", "fractions", "decimal", "asyncio",
    }
)
"""Modules a cell may import (`asyncio` is a restricted facade, the others filtered views)."""

FORBIDDEN_BUILTINS = frozenset(
    {
        "open", "eval", "exec", "compile", "globals", "locals", "vars", "dir", "breakpoint",
        "input", "help", "memoryview", "exit", "quit", "copyright", "credits", "license",
    }
)
"""Builtins that do not exist in the sandbox (a call to one is rejected before running)."""

_FRAME_PREFIXES = ("gi_", "cr_", "ag_", "f_", "tb_", "co_")
"""Attribute prefixes of generators, coroutines, async generators, frames, tracebacks, code."""
_BLOCKED_ATTRIBUTES = frozenset(
    {
        "format", "format_map",  # "{0.__class__}".format(x) reads attributes by string
        "get_loop", "get_coro", "get_stack", "print_stack",  # tasks/futures -> event loop, frames
    }
)
"""Public attribute names that lead to the event loop, frames or string-driven attribute access."""

READABLE_DUNDERS = frozenset({"__name__", "__qualname__", "__doc__"})
"""Dunder attributes a cell may read (strings only; `type(x).__name__` is common and harmless)."""

DUNDER_METHODS = frozenset(
    {
        "__init__", "__repr__", "__str__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
        "__ge__", "__hash__", "__len__", "__iter__", "__next__", "__contains__", "__getitem__",
        "__setitem__", "__delitem__", "__bool__", "__add__", "__sub__", "__mul__", "__truediv__",
        "__floordiv__", "__mod__", "__neg__", "__abs__", "__call__", "__enter__", "__exit__",
        "__aenter__", "__aexit__", "__aiter__", "__anext__", "__post_init__",
    }
)
"""Special methods a class body may define (defining them reaches nothing; using others is blocked)."""

AWAIT_WRAPPERS = frozenset({"gather", "wait", "wait_for", "create_task", "as_completed", "shield"})
"""asyncio functions that take care of awaiting an async tool call passed to them."""

MAX_CODE_CHARS = 200_000
"""Longest cell accepted."""


class PolicyViolation(Exception):
    """A cell the policy rejects; the message names the line and the rule."""

    def __init__(self, message: str, kind: str = "policy") -> None:
        super().__init__(message)
        self.kind = kind
        """"syntax" when the cell does not parse or compile, else "policy"."""


def is_blocked_attribute(name: str) -> bool:
    """Whether an attribute name is off limits (private, dunder, frame-walking or format).

    Anything but an exact `str` is blocked, and `str`'s own methods do the tests: a subclass
    could override `startswith`, `__eq__` or `__hash__` to pass any name.
    """
    if type(name) is not str:
        return True
    return str.startswith(name, "_") or str.startswith(name, _FRAME_PREFIXES) or frozenset.__contains__(
        _BLOCKED_ATTRIBUTES, name
    )


def check_code(code: str, async_tools: frozenset[str] = frozenset({"launch_subagent"})) -> str | None:
    """The language policy alone: None if `code` may run, else a readable message naming the line."""
    try:
        checked_tree(code, async_tools)
    except PolicyViolation as exc:
        return str(exc)
    return None


def checked_tree(code: str, async_tools: frozenset[str] = frozenset({"launch_subagent"})) -> ast.Module:
    """Parse `code` (top-level `await` allowed) and apply the policy; PolicyViolation if rejected."""
    if (too_long := length_violation(code)) is not None:
        raise PolicyViolation(too_long)
    try:
        with warnings.catch_warnings():  # SyntaxWarnings would go to the checking process's stderr
            warnings.simplefilter("ignore")
            tree = ast.parse(code, "<cell>", "exec")
            # compile() finds the errors the parser lets through (return outside a function, ...).
            compile(tree, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except SyntaxError as exc:
        raise PolicyViolation(format_syntax_error(exc), "syntax") from None
    except ValueError as exc:  # e.g. null bytes in the source
        raise PolicyViolation(f"SyntaxError: {exc}", "syntax") from None
    except (RecursionError, MemoryError):
        raise PolicyViolation("The cell is too deeply nested to parse.") from None
    try:
        _PolicyVisitor(async_tools).visit(tree)
    except RecursionError:
        raise PolicyViolation("The cell is too deeply nested to check.") from None
    return tree


def length_violation(code: str) -> str | None:
    """The message for a cell over `MAX_CODE_CHARS`, else None (cheap: the host checks it too)."""
    if len(code) > MAX_CODE_CHARS:
        return f"The cell is {len(code):,} characters long; the limit is {MAX_CODE_CHARS:,}."
    return None


def format_syntax_error(exc: SyntaxError) -> str:
    """A SyntaxError as `SyntaxError: msg (line N)` plus the offending line with a caret."""
    text = f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})"
    if exc.text:
        line = exc.text.rstrip("\n")
        stripped = line.lstrip()
        text += f"\n    {stripped}"
        if exc.offset and exc.offset > 0:
            caret = max(0, exc.offset - 1 - (len(line) - len(stripped)))
            text += "\n    " + " " * caret + "^"
    return text


def _fail(node: ast.AST, message: str) -> PolicyViolation:
    return PolicyViolation(f"Line {getattr(node, 'lineno', '?')}: {message}")


def _format_fields(template: str) -> list[str]:
    """The field names of a format string, nested specs included; ValueError if malformed."""
    fields = []
    for _, name, spec, _ in string.Formatter().parse(template):
        if name is not None:
            fields.append(name)
        if spec:
            fields.extend(_format_fields(spec))
    return fields


class _PolicyVisitor(ast.NodeVisitor):
    """Raises PolicyViolation at the first forbidden construct."""

    def __init__(self, async_tools: frozenset[str]) -> None:
        self._async_tools = async_tools
        self._approved: set[int] = set()  # ids of `"literal".format` attributes already checked
        self._awaited = 0  # >0 while inside `await ...` or an AWAIT_WRAPPERS call
        self._class_depth = 0  # >0 directly inside a class body

    # -- imports -------------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)
            self._check_binding(node, alias.asname)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            raise _fail(node, "relative imports are not allowed in the sandbox.")
        self._check_module(node, node.module or "")
        for alias in node.names:
            if alias.name.startswith("_"):
                raise _fail(node, f"importing the private name {alias.name!r} is not allowed.")
            self._check_binding(node, alias.asname)

    def _check_module(self, node: ast.AST, name: str) -> None:
        if name not in ALLOWED_MODULES:
            allowed = ", ".join(sorted(ALLOWED_MODULES))
            raise _fail(node, f"import of {name!r} is not allowed in the sandbox (allowed modules: {allowed}).")

    # -- names and attributes ------------------------------------------------------------------

    def visit_Name(self, node: ast.Name) -> None:
        self._check_binding(node, node.id)

    def _check_binding(self, node: ast.AST, name: str | None) -> None:
        if name and name.startswith("__"):
            raise _fail(node, f"the name {name!r} is not allowed (names starting with '__' are reserved).")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        readable = node.attr in READABLE_DUNDERS and isinstance(node.ctx, ast.Load)
        if id(node) not in self._approved and not readable and is_blocked_attribute(node.attr):
            if node.attr in ("format", "format_map"):
                raise _fail(
                    node,
                    f"'.{node.attr}' is only allowed directly on a string literal with simple fields; "
                    "use an f-string instead.",
                )
            raise _fail(node, f"access to the attribute {node.attr!r} is not allowed in the sandbox.")
        self.generic_visit(node)

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        for name in node.kwd_attrs:  # `case C(attr=x)` reads `attr` from the subject
            if is_blocked_attribute(name):
                raise _fail(node, f"matching on the attribute {name!r} is not allowed in the sandbox.")
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self._check_binding(node, name)

    visit_Nonlocal = visit_Global

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self._check_binding(node, node.name)
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        self._check_binding(node, node.arg)
        self.generic_visit(node)

    # -- definitions ---------------------------------------------------------------------------

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._check_binding(node, node.name)
        for item in node.decorator_list + node.bases + node.keywords:
            self.visit(item)
        self._class_depth += 1
        for stmt in node.body:
            self.visit(stmt)
        self._class_depth -= 1

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        in_class = self._class_depth > 0
        if node.name.startswith("__") and not (in_class and node.name in DUNDER_METHODS):
            raise _fail(node, f"defining {node.name!r} is not allowed in the sandbox.")
        outer = (self._class_depth, self._awaited)
        self._class_depth, self._awaited = 0, 0  # a function body is awaited (or not) on its own
        self.generic_visit(node)
        self._class_depth, self._awaited = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    # -- calls ---------------------------------------------------------------------------------

    def visit_Await(self, node: ast.Await) -> None:
        self._awaited += 1
        self.generic_visit(node)
        self._awaited -= 1

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in FORBIDDEN_BUILTINS:
            raise _fail(node, f"{func.id}() is not available in the sandbox.")
        if isinstance(func, ast.Name) and func.id in self._async_tools and not self._awaited:
            raise _fail(
                node,
                f"{func.id}(...) must be awaited: write `await {func.id}(...)`, or pass the calls to "
                f"`await asyncio.gather({func.id}(...), {func.id}(...))` to run them concurrently.",
            )
        if isinstance(func, ast.Attribute) and func.attr == "format":
            self._check_literal_format(func)
        wrapper = _called_name(func) in AWAIT_WRAPPERS
        self._awaited += wrapper
        self.generic_visit(node)
        self._awaited -= wrapper

    def _check_literal_format(self, func: ast.Attribute) -> None:
        receiver = func.value
        if not (isinstance(receiver, ast.Constant) and isinstance(receiver.value, str)):
            return  # visit_Attribute rejects it
        try:
            fields = _format_fields(receiver.value)
        except ValueError:
            return  # malformed template: let the call fail at run time like normal Python
        for name in fields:
            if "." in name or "[" in name:
                raise _fail(
                    func,
                    f"format field {{{name}}} accesses an attribute or item; use an f-string instead.",
                )
        self._approved.add(id(func))


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None
