"""Runtime half of the language policy: the builtins and modules a cell sees.

The AST policy stops dangerous *syntax*; these objects stop the routes that take names as
strings at run time (`getattr(x, "__class__")`, `operator.attrgetter("f_globals")`,
`functools.update_wrapper(..., updated=("__globals__",))`) or evaluate strings as code
(`functools.singledispatch` via `typing.get_type_hints`), the
missing builtins (`open`, `eval`, ...), dynamic class creation (`type(name, bases, dict)`) and
imports, which resolve to pre-imported, filtered module views: no module object, and so no
`json.codecs.open`, is ever reachable.
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import collections
import decimal
import fractions
import functools
import heapq
import itertools
import json
import math
import operator
import random
import re
import statistics
import string
import types
from collections.abc import Callable
from typing import Any

from sera.sandbox.policy import ALLOWED_MODULES, FORBIDDEN_BUILTINS, is_blocked_attribute


class ToolError(Exception):
    """A host tool failed; the message is the tool's own error text."""

    __module__ = "builtins"  # tracebacks show `ToolError: ...`, not the worker's module path

_PLAIN_BUILTINS = (
    "abs aiter all anext any ascii bin bool bytearray bytes callable chr classmethod complex dict "
    "divmod enumerate filter float format frozenset hash hex id int isinstance issubclass iter len "
    "list map max min next object oct ord pow print property range repr reversed round set slice "
    "sorted staticmethod str sum super tuple zip Ellipsis NotImplemented __build_class__"
).split()
"""Builtins passed through unchanged (`__build_class__` makes `class` statements work)."""

_ASYNCIO_NAMES = (
    "gather sleep wait wait_for as_completed create_task shield Lock Event Semaphore Queue "
    "TimeoutError FIRST_COMPLETED FIRST_EXCEPTION ALL_COMPLETED"
).split()
"""What `import asyncio` exposes: awaiting and synchronising, never the event loop."""

_REAL_MODULES: dict[str, types.ModuleType] = {
    m.__name__: m
    for m in (
        math, itertools, collections, json, re, functools, operator, statistics, string, random,
        heapq, bisect, fractions, decimal,
    )
}
_EXCLUDED = {
    "string": {"Formatter"},  # Formatter.get_field reads attributes by string
    # register() calls typing.get_type_hints, which eval()s string annotations: unchecked code
    "functools": {"singledispatch", "singledispatchmethod"},
}
"""Public names withheld from a module view."""


class SandboxModule(types.SimpleNamespace):
    """What `import name` gives a cell: a module's public, non-module attributes."""

    def __repr__(self) -> str:
        return f"<sandboxed module {self.__dict__['__name__']!r}>"


def _check_name(name: Any) -> str:
    """`name` itself if it is an exact `str` naming an allowed attribute; raises otherwise.

    Exact type only: a `str` subclass can override `startswith`, `__eq__`, `__hash__`, ..., so
    every test here uses `str`'s own methods on a real string, which a cell cannot replace.
    """
    if type(name) is not str:
        raise TypeError(f"attribute name must be a str, not {type(name).__name__}")
    if is_blocked_attribute(name):
        raise AttributeError(f"access to the attribute {name!r} is not allowed in the sandbox")
    return name


def safe_getattr(obj: Any, name: str, *default: Any) -> Any:
    """`getattr` that refuses blocked names (even with a default)."""
    return getattr(obj, _check_name(name), *default)


def safe_hasattr(obj: Any, name: str) -> bool:
    """`hasattr` that refuses blocked names."""
    return hasattr(obj, _check_name(name))


def safe_setattr(obj: Any, name: str, value: Any) -> None:
    """`setattr` that refuses blocked names."""
    setattr(obj, _check_name(name), value)


def safe_delattr(obj: Any, name: str) -> None:
    """`delattr` that refuses blocked names."""
    delattr(obj, _check_name(name))


# The callables `operator` builds are re-implemented here rather than wrapped: `type()` of a
# wrapped one would give back the real C class, whose constructor takes any name.


class AttrGetter:
    """The sandbox's `operator.attrgetter`: each dotted part is checked once, when built."""

    __slots__ = ("_paths",)

    def __init__(self, attr: str, *attrs: str) -> None:
        paths = []
        for name in (attr, *attrs):
            if type(name) is not str:
                raise TypeError(f"attribute name must be a str, not {type(name).__name__}")
            paths.append(tuple(_check_name(part) for part in str.split(name, ".")))
        self._paths = tuple(paths)

    def __call__(self, obj: Any) -> Any:
        values = []
        for path in self._paths:
            value = obj
            for part in path:
                value = getattr(value, part)
            values.append(value)
        return values[0] if len(values) == 1 else tuple(values)

    def __repr__(self) -> str:
        return f"operator.attrgetter({', '.join(repr('.'.join(p)) for p in self._paths)})"


class MethodCaller:
    """The sandbox's `operator.methodcaller`: the method name is checked when built."""

    __slots__ = ("_name", "_args", "_kwargs")

    def __init__(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        self._name = _check_name(name)
        self._args = args
        self._kwargs = kwargs

    def __call__(self, obj: Any) -> Any:
        return getattr(obj, self._name)(*self._args, **self._kwargs)

    def __repr__(self) -> str:
        return f"operator.methodcaller({self._name!r}, ...)"


class ItemGetter:
    """The sandbox's `operator.itemgetter` (items only; re-implemented so no C class leaks)."""

    __slots__ = ("_items",)

    def __init__(self, item: Any, *items: Any) -> None:
        self._items = (item, *items)

    def __call__(self, obj: Any) -> Any:
        if len(self._items) == 1:
            return obj[self._items[0]]
        return tuple(obj[item] for item in self._items)

    def __repr__(self) -> str:
        return f"operator.itemgetter({', '.join(map(repr, self._items))})"


def safe_update_wrapper(wrapper: Any, wrapped: Any) -> Any:
    """`functools.update_wrapper` with the default attributes only.

    Its `assigned`/`updated` arguments name attributes by string and merge dicts, e.g.
    `updated=("__globals__",)` would copy a worker function's globals into the cell's namespace.
    """
    return functools.update_wrapper(wrapper, wrapped)


def safe_wraps(wrapped: Any) -> Callable[[Any], Any]:
    """`functools.wraps` with the default attributes only (see `safe_update_wrapper`).

    A closure, not `functools.wraps`' partial: that partial's public `.func` is the real
    `update_wrapper`, which takes attribute names again.
    """

    def decorate(wrapper: Any) -> Any:
        return functools.update_wrapper(wrapper, wrapped)

    return decorate


class _SafeTypeMeta(type):
    """Makes `SafeType` behave like one-argument `type` and stand in for `type` in checks."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) != 1 or kwargs:
            raise TypeError("type() with 3 arguments is not allowed in the sandbox; use a class statement")
        kind = type(args[0])
        return cls if issubclass(kind, type) else kind  # never hand out the real metaclass

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, type)

    def __subclasscheck__(cls, sub: Any) -> bool:
        return issubclass(sub, type)

    def __repr__(cls) -> str:
        return "<class 'type'>"


class SafeType(metaclass=_SafeTypeMeta):
    """The sandbox's `type`: `type(x)` works, `type(name, bases, ns)` does not."""


class _Unavailable:
    """Stands in for a forbidden builtin so that calling it gives a clear error."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError(f"{self._name}() is not available in the sandbox")

    def __repr__(self) -> str:
        return f"<unavailable builtin {self._name}>"


def build_modules() -> dict[str, SandboxModule]:
    """The module views for every allowed import (fresh objects: a cell may mutate them)."""
    views = {
        name: SandboxModule(**_public_attributes(module, _EXCLUDED.get(name, set())))
        for name, module in _REAL_MODULES.items()
    }
    views["operator"].attrgetter = AttrGetter
    views["operator"].methodcaller = MethodCaller
    views["operator"].itemgetter = ItemGetter
    views["functools"].update_wrapper = safe_update_wrapper
    views["functools"].wraps = safe_wraps
    views["asyncio"] = SandboxModule(__name__="asyncio", **{n: getattr(asyncio, n) for n in _ASYNCIO_NAMES})
    assert set(views) == ALLOWED_MODULES, "policy and runtime disagree on the allowed modules"
    return views


def _public_attributes(module: types.ModuleType, excluded: set[str]) -> dict[str, Any]:
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    attrs: dict[str, Any] = {"__name__": module.__name__}
    for name in names:
        value = getattr(module, name, None)
        if name.startswith("_") or name in excluded or isinstance(value, types.ModuleType):
            continue
        attrs[name] = value
    return attrs


def build_builtins(modules: dict[str, SandboxModule]) -> dict[str, Any]:
    """The `__builtins__` of a cell: plain builtins, safe replacements, stubs for forbidden ones."""
    table: dict[str, Any] = {name: getattr(builtins, name) for name in _PLAIN_BUILTINS}
    table.update(
        {
            name: value
            for name, value in vars(builtins).items()
            if isinstance(value, type) and issubclass(value, BaseException)
        }
    )
    table.update({name: _Unavailable(name) for name in FORBIDDEN_BUILTINS})
    table.update(
        getattr=safe_getattr, hasattr=safe_hasattr, setattr=safe_setattr, delattr=safe_delattr,
        type=SafeType, ToolError=ToolError, __import__=_importer(modules),
    )
    return table


def _importer(modules: dict[str, SandboxModule]) -> Callable[..., SandboxModule]:
    def safe_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level != 0 or name not in modules:  # the AST policy already refused these; belt and braces
            raise ImportError(f"import of {name!r} is not allowed in the sandbox")
        return modules[name]

    return safe_import
