"""Which root failures are errors, of what kind, and whether they are the infrastructure's."""

import pytest

from sera.eval.failures import classify
from sera.types import AgentNode, RolloutTree


def _tree(root_error=None, tree_error=None):
    root = AgentNode(id="n0", goal="g", budget=1, error=root_error)
    return RolloutTree(task_id="t", env="e", root_id="n0", nodes={"n0": root}, error=tree_error)


@pytest.mark.parametrize(("root_error", "tree_error", "kind", "infra"), [
    ("policy call failed: SamplerError: server_error: HTTP 500 from http://h/v1: boom", None, "server_error", True),
    ("policy call failed: SamplerError: endpoint_down: cannot connect", None, "endpoint_down", True),
    ("policy call failed: SamplerError: prompt_too_long: rejected", None, "prompt_too_long", False),
    ("policy call failed: RuntimeError: CUDA out of memory", None, "policy_error", True),
    ("policy call timed out after 1800 s", None, "policy_timeout", True),
    ("agent crashed: building the environment failed: OSError: x", "the root environment failed: building ...", "root_env", True),
    ("agent crashed: WeakIsolationError: sandbox isolation unavailable: no userns", None, "sandbox_isolation", True),
    ("cancelled before finishing", "rollout timed out after 3600 s", "rollout_timeout", False),
])
def test_errors_and_their_kinds(root_error, tree_error, kind, infra):
    found = classify(_tree(root_error, tree_error))
    assert found is not None and (found.kind, found.infra) == (kind, infra)
    assert "\n" not in found.message


@pytest.mark.parametrize("root_error", [None, "exhausted the budget of 20 policy calls before finishing; the task may be incomplete"])
def test_model_outcomes_are_not_errors(root_error):
    assert classify(_tree(root_error)) is None
