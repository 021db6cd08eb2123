"""Models reached by a short name instead of a folder: plug-ins registered through package metadata.

A package registers a model factory under the entry-point group `sera.models`:

    [project.entry-points."sera.models"]
    tiny = "sera.testing.tiny:tiny_model_and_tokenizer"

A factory is called with `seed=` (the run's seed: random-init models must be rebuilt exactly) and
returns `(model, tokenizer)`. The library finds factories through `importlib.metadata`, so it never
imports the package that registered one (sera's own test kit registers `tiny` this way).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

ENTRY_POINT_GROUP = "sera.models"
"""The entry-point group model factories are registered under."""

ModelFactory = Callable[..., tuple[Any, Any]]
"""`factory(seed=int) -> (model, tokenizer)`."""


class UnknownModelName(LookupError):
    """No package registered a factory under this name."""


def registered_names() -> list[str]:
    """Names registered under `sera.models`, sorted."""
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def is_registered(name: str) -> bool:
    """Whether some installed package registered `name`."""
    return bool(entry_points(group=ENTRY_POINT_GROUP, name=name))


def registered_factory(name: str) -> ModelFactory:
    """The factory registered under `name`; `UnknownModelName` (one line) when none is."""
    found = list(entry_points(group=ENTRY_POINT_GROUP, name=name))
    if not found:
        known = ", ".join(registered_names()) or "none"
        raise UnknownModelName(f"no model is registered as {name!r} (entry-point group {ENTRY_POINT_GROUP!r}; "
                               f"registered: {known})")
    if len({ep.value for ep in found}) > 1:
        raise UnknownModelName(f"model name {name!r} is registered twice: {', '.join(ep.value for ep in found)}")
    return found[0].load()


def load_registered(name: str, *, seed: int = 0) -> tuple[Any, Any]:
    """`(model, tokenizer)` from the factory registered under `name`, seeded."""
    return registered_factory(name)(seed=seed)
