"""The layering rules of scripts/import_cycles.py hold on src/sera, and the checker catches a break."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "import_cycles.py"


def _checker():
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_library_has_no_cycle_and_no_import_of_the_test_kit() -> None:
    checker = _checker()
    graph = checker.import_graph(checker.modules())
    assert checker.cycles(graph) == []
    assert checker.layer_violations(graph) == []


def test_an_import_of_the_test_kit_or_up_into_the_trainer_is_reported() -> None:
    checker = _checker()
    graph = {"sera.train.sft": {"sera.testing.tiny"}, "sera.eval.harness": {"sera.train.loop"},
             "sera.pipeline.job": {"sera.train.loop"}, "sera.testing.tiny": {"sera.types"}}
    assert checker.layer_violations(graph) == [
        "sera.eval.harness imports sera.train.loop: a lower layer reaching up into the trainer",
        "sera.train.sft imports the test kit (sera.testing.tiny)",
    ]


def test_serving_importing_anything_but_policy_runtime_and_types_is_reported() -> None:
    checker = _checker()
    graph = {"sera.serving.backends": {"sera.policy.transformers_sampler", "sera.serving.weight_sync",
                                       "sera.train.config", "sera.eval.seeds"},
             "sera.serving.weight_sync": {"sera.runtime.policy", "sera.types"}}
    assert checker.layer_violations(graph) == [
        "sera.serving.backends imports sera.eval.seeds: serving builds only on sera.policy, sera.runtime, sera.types",
        "sera.serving.backends imports sera.train.config: a lower layer reaching up into the trainer",
    ]
