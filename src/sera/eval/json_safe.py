"""Make a rollout tree's strings safe to save as JSON, once, before it is written.

Model replies and environment output may hold lone surrogates (which no UTF-8 encoder accepts,
so the tree would not serialise at all) and NUL or other control characters (which break
terminals and many JSON consumers). Every string of the tree, keys included, goes through
`sera.text_safety.clean_text`; how many strings changed is recorded in the tree's
`sanitized_strings` counter so a summary shows it happened.
"""

from __future__ import annotations

from typing import Any

from sera.counters import Counter
from sera.text_safety import clean_text
from sera.types import RolloutTree


def make_json_safe(tree: RolloutTree) -> tuple[RolloutTree, int]:
    """`tree` with every unsafe string escaped, and the number of strings that were.

    An untouched tree is returned as it is; a changed one is rebuilt (and so re-validated) from
    the cleaned data, with `Counter.SANITIZED_STRINGS` added to its counters.
    """
    data, changed = _clean(tree.model_dump(mode="json"))
    if not changed:
        return tree, 0
    counters = data.setdefault("counters", {})
    counters[Counter.SANITIZED_STRINGS.value] = counters.get(Counter.SANITIZED_STRINGS.value, 0) + changed
    data["counters"] = dict(sorted(counters.items()))
    return RolloutTree.model_validate(data), changed


def _clean(value: Any) -> tuple[Any, int]:
    """`value` (a JSON-mode dump) with its strings cleaned, and how many changed."""
    if isinstance(value, str):
        text, changed = clean_text(value)
        return text, int(changed)
    if isinstance(value, list):
        items = [_clean(item) for item in value]
        return [item for item, _ in items], sum(n for _, n in items)
    if isinstance(value, dict):
        total, out = 0, {}
        for key, item in value.items():
            clean_key, a = _clean(key)
            clean_item, b = _clean(item)
            out[clean_key] = clean_item
            total += a + b
        return out, total
    return value, 0
