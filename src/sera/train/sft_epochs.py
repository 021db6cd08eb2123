"""`sera sft`'s epochs: seeded shuffled batches, held-out NLL per epoch, checkpoints that resume exactly.

Where a run stands is a `SftPosition`, saved in every checkpoint's `state.json` beside the
learner (weights, optimizer, scheduler) and the RNG state. A checkpoint is written at the end of
each epoch, every `sft.checkpoint_every` optimizer steps inside one, and when SIGINT/SIGTERM stops
the run (at the next batch boundary). Resuming replays the seeded shuffles of the epochs before
the saved one, skips the batches it had trained, and cuts `metrics.jsonl` back to the saved step,
so a killed-and-resumed run trains the same batches in the same order, from the same state, as an
uninterrupted one: same weights, same loss lines (only timings differ).
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from sera.checkpoints.store import capture_rng, load_latest, restore_rng, save_checkpoint
from sera.train.config import TrainConfig
from sera.train.datums import Datum
from sera.train.learner import TorchLearner
from sera.train.metrics import MetricsSink
from sera.train.run_dir import CKPT_DIR, TrainError

NllFn = Callable[[TorchLearner, Sequence[Datum]], tuple[float, int]]
"""`heldout_nll`: (nats per trained token, trained tokens) of datums under the learner."""


@dataclass
class SftPosition:
    """Where an SFT run stands, as a checkpoint records it."""

    epoch: int
    """The epoch in progress (1-based); with `epoch_done`, the last one finished."""
    batch: int
    """Batches of `epoch` already trained."""
    epoch_done: bool
    """True once `epoch`'s held-out evaluation and checkpoint are written."""
    nll_before: float
    """Held-out NLL before any training (epoch 0's evaluation)."""
    nll: float
    """Held-out NLL at the last evaluation."""
    losses: list[tuple[float, int]] = field(default_factory=list)
    """`(loss, trained tokens)` of each batch of `epoch` trained so far (the epoch's mean loss)."""
    tokens: int = 0
    """Tokens of `epoch`'s batches so far."""
    trained: int = 0
    """Trained tokens of `epoch`'s batches so far."""
    seconds: float = 0.0
    """Training seconds of `epoch` so far (over invocations)."""


@dataclass(frozen=True)
class EpochsResult:
    """How `train_epochs` ended."""

    position: SftPosition
    """Where the run stands."""
    checkpoint: Path
    """The newest checkpoint directory."""
    stopped_by: str | None
    """The signal that stopped the run before its last epoch (`SIGINT`, `SIGTERM`), else None."""


def restore(out: Path, learner: TorchLearner, metrics: MetricsSink) -> SftPosition | None:
    """Load the newest checkpoint of the SFT run in `out` into `learner` and the RNGs, cut
    `metrics.jsonl` back to its step, and return its position; None (and an empty metrics file)
    when there is none yet."""
    ckpt = load_latest(out / CKPT_DIR)
    if ckpt is None:
        metrics.truncate_after(0)
        return None
    learner.load_state_dict(torch.load(ckpt.file("learner.pt"), weights_only=True))
    restore_rng(torch.load(ckpt.file("rng.pt"), weights_only=True))
    state = ckpt.read_json("state.json")
    if state.get("kind") != "sft" or "position" not in state:
        raise TrainError(f"{ckpt.path / 'state.json'}: not a resumable sera sft checkpoint (no position; written by sera train, or by an older sera sft)")
    position = SftPosition(**state["position"])
    position.losses = [(float(loss), int(n)) for loss, n in position.losses]
    metrics.truncate_after(learner.steps + 1)  # lines of steps <= the checkpoint's are what it covers
    return position


def train_epochs(
    cfg: TrainConfig, out: Path, learner: TorchLearner, train: Sequence[Datum], val: Sequence[Datum],
    position: SftPosition, metrics: MetricsSink, received: list[int], nll_of: NllFn, log: Callable[[str], None],
    *, restored: bool,
) -> EpochsResult:
    """Train from `position` (`restored`: read from the newest checkpoint) to the end of
    `sft.epochs`, or until a signal lands in `received`."""
    rng = random.Random(cfg.seed)
    size, every = cfg.sft.batch_datums, cfg.sft.checkpoint_every
    checkpoint, saved_at = None, learner.steps if restored else None
    for epoch in range(1, cfg.sft.epochs + 1):
        order = list(range(len(train)))
        rng.shuffle(order)  # every epoch's shuffle is drawn, also those a resumed run skips
        if epoch < position.epoch or (epoch == position.epoch and position.epoch_done):
            continue
        if epoch > position.epoch:
            position = SftPosition(epoch=epoch, batch=0, epoch_done=False, nll_before=position.nll_before,
                                   nll=position.nll)
        starts = list(range(0, len(order), size))
        for index in range(position.batch, len(starts)):
            if received:
                if saved_at != learner.steps:
                    checkpoint = _save(out, cfg, learner, position)
                return EpochsResult(position, checkpoint or _latest(out), signal.Signals(received[0]).name)
            started = time.perf_counter()
            batch = [train[i] for i in order[starts[index]:starts[index] + size]]
            stats = learner.train_step(batch, "sft", {})  # the NLL takes no options
            fb = stats.forward_backward
            position.losses.append((fb.loss, fb.trained_tokens))
            position.tokens += fb.tokens
            position.trained += fb.trained_tokens
            position.batch = index + 1
            position.seconds += time.perf_counter() - started
            metrics.append({"kind": "train", "epoch": epoch, "step": stats.optim.step, "loss": fb.loss,
                            "heldout_nll": None, "grad_norm": stats.optim.grad_norm, "lr": stats.optim.lr,
                            "trained_tokens": fb.trained_tokens, "tokens": fb.tokens, "datums": fb.datums,
                            "tokens_per_s": stats.tokens_per_s, "seconds": stats.seconds})
            if every and learner.steps % every == 0 and position.batch < len(starts):
                checkpoint, saved_at = _save(out, cfg, learner, position), learner.steps
        nll, val_tokens = nll_of(learner, val)
        losses = position.losses
        train_loss = sum(loss * n for loss, n in losses) / max(1, sum(n for _, n in losses))
        seconds = position.seconds
        line = {"kind": "eval", "epoch": epoch, "step": learner.steps, "loss": train_loss, "heldout_nll": nll,
                "heldout_tokens": val_tokens, "trained_tokens": position.trained, "tokens": position.tokens,
                "tokens_per_s": position.tokens / seconds if seconds > 0 else 0.0, "time/epoch": seconds}
        metrics.append(line)
        position.epoch_done, position.nll = True, nll
        checkpoint, saved_at = _save(out, cfg, learner, position, line), learner.steps
        log(f"epoch {epoch}: train loss {train_loss:.4f}, held-out NLL {nll:.4f} nats/token, "
            f"{line['tokens_per_s']:.0f} tokens/s, {learner.steps} steps")
    return EpochsResult(position, checkpoint or _latest(out), None)


def _latest(out: Path) -> Path:
    ckpt = load_latest(out / CKPT_DIR)
    assert ckpt is not None, "a run past its first epoch has a checkpoint"
    return ckpt.path


def _save(out: Path, cfg: TrainConfig, learner: TorchLearner, position: SftPosition,
          line: dict[str, Any] | None = None) -> Path:
    weights = learner.state_dict()
    state = {"kind": "sft", "epoch": position.epoch, "steps": learner.steps, "heldout_nll": position.nll,
             "position": asdict(position)}
    files: dict[str, Any] = {
        "learner.pt": lambda f: torch.save(weights, f),
        "rng.pt": lambda f: torch.save(capture_rng(), f),
        "state.json": json.dumps(state, indent=1).encode(),
    }
    if line is not None:
        files["last_metrics.json"] = json.dumps(line).encode()
    # One checkpoint per step: a step is saved at most once (`train_epochs`' `saved_at`).
    saved = save_checkpoint(out / CKPT_DIR, files, step=learner.steps, version=learner.steps, round=position.epoch,
                            keep_last=cfg.checkpoint.keep_last, meta={"kind": "sft", "model": cfg.model.name})
    return saved.path
