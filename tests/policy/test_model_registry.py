"""Models by name: the test kit's `tiny` is found through package metadata, unknown names fail in one line."""

from __future__ import annotations

import pytest
import torch

from sera.policy.model_registry import UnknownModelName, is_registered, load_registered, registered_factory


def test_tiny_is_registered_by_the_project_metadata_and_seeded() -> None:
    assert is_registered("tiny")
    assert registered_factory("tiny").__module__ == "sera.testing.tiny"
    (a, _), (b, _), (c, _) = (load_registered("tiny", seed=s) for s in (3, 3, 4))
    weights = lambda m: torch.cat([p.flatten() for p in m.parameters()])  # noqa: E731
    assert torch.equal(weights(a), weights(b)) and not torch.equal(weights(a), weights(c))


def test_an_unregistered_name_is_one_line_naming_it_and_what_is_registered() -> None:
    assert not is_registered("no-such-model")
    with pytest.raises(UnknownModelName) as info:
        registered_factory("no-such-model")
    message = str(info.value)
    assert "\n" not in message and "'no-such-model'" in message and "tiny" in message
