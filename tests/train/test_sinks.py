"""Metric sinks: the scalars of a record, TensorBoard events read back (with a resume purge),
W&B offline when wandb is installed, else its one-line error."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from sera.train.sinks import SinkError, TensorBoardSink, WandbSink, open_sinks, scalars

RECORD = {"step": 3, "stage": "execution", "trained": True, "loss": 0.5, "grad_norm": None, "tasks": ["a", "b"],
          "learner": {"ratio_mean": 1.0, "nested": {"x": 2}}, "time/step": 1.5, "nan": float("nan"), "skipped": False}


def test_scalars_flatten_and_skip_what_is_not_a_number():
    assert scalars(RECORD) == {"step": 3.0, "trained": 1.0, "loss": 0.5, "learner/ratio_mean": 1.0,
                               "learner/nested/x": 2.0, "time/step": 1.5, "skipped": 0.0}


def _events(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return acc


def test_tensorboard_scalars_read_back(tmp_path):
    sink = TensorBoardSink(tmp_path / "tb")
    for step in range(3):
        sink.write(step, {"step": step, "loss": 1.0 / (step + 1), "trained": step != 1, "stage": "execution",
                          "learner": {"grad_norm": 2.0 * step}})
    sink.close()
    acc = _events(tmp_path / "tb")
    assert set(acc.Tags()["scalars"]) == {"step", "loss", "trained", "learner/grad_norm"}
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    assert [e.value for e in acc.Scalars("trained")] == [1.0, 0.0, 1.0]
    assert [e.value for e in acc.Scalars("learner/grad_norm")] == [0.0, 2.0, 4.0]


def test_tensorboard_resume_purges_the_redone_steps(tmp_path):
    first = TensorBoardSink(tmp_path / "tb")
    for step in range(5):  # the interrupted run got to step 4; its checkpoint covers steps 0-2
        first.write(step, {"loss": float(step)})
    first.close()
    resumed = TensorBoardSink(tmp_path / "tb", resume_from=3)
    for step in (3, 4, 5):
        resumed.write(step, {"loss": 10.0 + step})
    resumed.close()
    loss = _events(tmp_path / "tb").Scalars("loss")
    assert [(e.step, e.value) for e in loss] == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 13.0), (4, 14.0), (5, 15.0)]


def test_open_sinks_follows_the_logging_config(tmp_path):
    assert open_sinks(tmp_path, tensorboard=False, wandb_project=None) == []
    (sink,) = open_sinks(tmp_path, tensorboard=True, wandb_project=None, resume_from=2)
    sink.write(2, {"loss": 1.0})
    sink.close()
    assert [e.step for e in _events(tmp_path / "tensorboard").Scalars("loss")] == [2]


def test_wandb_missing_is_one_line_naming_the_config_key(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    with pytest.raises(SinkError) as caught:
        WandbSink("my-project", tmp_path, {"seed": 1})
    message = str(caught.value)
    assert "logging.wandb_project='my-project'" in message and "pip install wandb" in message and "\n" not in message
    with pytest.raises(SinkError, match="logging.wandb_project"):
        open_sinks(tmp_path, tensorboard=True, wandb_project="my-project")


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed (optional)")
def test_wandb_offline_writes_under_the_run_dir_and_resumes_the_run_id(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    sink = WandbSink("sera-test", tmp_path, {"seed": 1})
    sink.write(0, RECORD)
    assert sink.run.summary["loss"] == 0.5 and sink.run.summary["learner/nested/x"] == 2.0
    sink.close()
    run_id = (tmp_path / "wandb_run_id").read_text().strip()
    assert run_id == sink.run_id
    assert [p.name for p in (tmp_path / "wandb").glob(f"offline-run-*-{run_id}")]
    resumed = WandbSink("sera-test", tmp_path, {"seed": 1}, resume_from=1)
    resumed.write(1, RECORD)
    resumed.close()
    assert resumed.run_id == run_id  # the same W&B run continues (its own offline folder, same id)
    fresh = WandbSink("sera-test", tmp_path / "other", {"seed": 1})
    fresh.close()
    assert fresh.run_id != run_id
