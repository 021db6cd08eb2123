"""The FSDP2 learner (`sera.train.fsdp_learner`) against `TorchLearner`: 2 gloo processes on CPU,
the tiny model in fp32, one step on the same datums from the same initial weights."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from sera.testing.tiny import tiny_model_and_tokenizer
from sera.train.datums import Datum
from sera.train.distributed import GroupSettings, check_backend, free_port, init_process_group, run_local
from sera.train.fsdp_learner import FsdpLearner
from sera.train.learner import LearnerConfig, TorchLearner

PARAM_ATOL = 1e-5
"""Largest |FSDP − single-process| difference of any weight after one AdamW step (lr 1e-3): the
two sum the same per-token gradients in a different order (fp32 rounding, ~1e-7 relative)."""
LOSS_RTOL = 1e-6
"""Relative tolerance on the reported loss and gradient norm."""

CONFIG = LearnerConfig(lr=1e-3, max_tokens_per_microbatch=60)
"""Small micro-batches, so that the ranks get different micro-batch counts (the padding path)."""


def _datums() -> list[Datum]:
    """Six datums, long ones at even indices: rank 0 (0, 2, 4) runs 3 micro-batches of 40
    tokens, rank 1 (1, 3, 5) one of three short rows; sampler log-probabilities for some."""
    rng = random.Random(5)
    out = []
    for i, length in enumerate((40, 9, 40, 12, 40, 7)):
        tokens = tuple(rng.randrange(3, 500) for _ in range(length))
        mask = (False,) * 3 + tuple(rng.random() < 0.7 for _ in range(length - 3))
        sampler = tuple(-rng.uniform(0.5, 8.0) if m and i % 3 else math.nan for m in mask)
        out.append(Datum(
            tokens=tokens, mask=mask, sampler_logprobs=sampler, advantage=rng.uniform(-1.5, 1.5),
            weight=rng.uniform(0.5, 2.0), depth=0, trajectory_id=f"d{i}", node_id=f"d{i}", stage="execution", steps=(),
        ))
    return out


def _fsdp_worker(rank: int, world: int, folder: str) -> dict:
    """One rank: a step, the full weights, an uneven batch, a state round trip, a sampler save."""
    model, tokenizer = tiny_model_and_tokenizer(0)
    # Activation checkpointing on here and off in the reference: it must not change the update.
    learner = FsdpLearner(model, LearnerConfig(**{**CONFIG.__dict__, "gradient_checkpointing": True}), tokenizer=tokenizer)
    data = _datums()
    fb = learner.forward_backward(data, "cispo")
    optim = learner.optim_step()
    weights = learner.full_weights()
    probe = learner.sequence_logprobs(data[0].tokens[:5], data[0].tokens[5:12])  # a collective too
    uneven = learner.forward_backward(data[:3])  # 2 datums on rank 0, 1 on rank 1
    learner.optimizer.zero_grad(set_to_none=True)
    state = learner.state_dict()
    other = FsdpLearner(tiny_model_and_tokenizer(1)[0], CONFIG)
    other.load_state_dict(state)
    restored = other.full_weights()
    learner.save_for_sampler(folder)
    try:  # rank 0 cannot write under a file: an error on every rank, not a hang at a barrier
        learner.save_for_sampler(Path(folder).parent / "blocker" / "inner")
        save_error = ""
    except (OSError, RuntimeError) as exc:
        save_error = f"{type(exc).__name__}: {exc}"
    return {
        "fb": fb, "optim": optim, "weights": weights, "probe": probe, "uneven": uneven, "restored": restored,
        "steps": other.steps, "save_error": save_error, "optimizer_keys": len(state["optimizer"].get("state", {})),
    }


def test_two_process_fsdp_step_equals_the_single_process_step(tmp_path):
    folder = tmp_path / "sampler"
    (tmp_path / "blocker").write_text("a file, not a folder")
    ranks = run_local(_fsdp_worker, 2, args=(str(folder),), timeout_s=240, threads_per_rank=1)

    model, tokenizer = tiny_model_and_tokenizer(0)
    reference = TorchLearner(model, CONFIG, tokenizer=tokenizer)
    fb = reference.forward_backward(_datums(), "cispo")
    optim = reference.optim_step()
    expected = {n: t.detach() for n, t in reference.model.state_dict().items()}

    zero, one = ranks
    assert zero["fb"].microbatches == 4  # 3 on rank 0, 1 on rank 1 (which pads with 2 dummy passes)
    for field in ("trained_tokens", "tokens", "datums", "sampler_tokens"):
        assert getattr(zero["fb"], field) == getattr(fb, field), field
    assert zero["fb"].loss == pytest.approx(fb.loss, rel=LOSS_RTOL)
    assert one["fb"].loss == zero["fb"].loss  # every rank reports the whole step
    assert zero["fb"].ratio_mean == pytest.approx(fb.ratio_mean, rel=LOSS_RTOL)
    assert zero["optim"].grad_norm == pytest.approx(optim.grad_norm, rel=LOSS_RTOL)
    assert optim.grad_norm > CONFIG.max_grad_norm  # so the clip (by the full sharded norm) acted
    assert zero["weights"].keys() == expected.keys() and one["weights"] == {}  # gathered to rank 0 only
    worst = max(float((zero["weights"][n] - expected[n]).abs().max()) for n in expected)
    print(f"max |fsdp - single| = {worst:.3g}")
    assert worst < PARAM_ATOL, worst
    moved = max(float((expected[n] - tiny_model_and_tokenizer(0)[0].state_dict()[n]).abs().max()) for n in expected)
    assert moved > 100 * PARAM_ATOL  # the step did something the tolerance could not hide

    probe = reference.sequence_logprobs(_datums()[0].tokens[:5], _datums()[0].tokens[5:12])
    torch.testing.assert_close(zero["probe"], probe, atol=PARAM_ATOL, rtol=0)
    torch.testing.assert_close(one["probe"], probe, atol=PARAM_ATOL, rtol=0)
    uneven = reference.forward_backward(_datums()[:3])  # after the step, as on the ranks
    assert zero["uneven"].datums == 3 and zero["uneven"].trained_tokens == uneven.trained_tokens
    assert zero["uneven"].loss == pytest.approx(uneven.loss, rel=1e-4)  # weights agree to PARAM_ATOL
    assert zero["steps"] == 1 and zero["optimizer_keys"] > 0
    assert all(torch.equal(zero["restored"][n], zero["weights"][n]) for n in expected)

    saved = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
    assert all(torch.equal(saved.state_dict()[n], zero["weights"][n]) for n in expected)
    assert (folder / "tokenizer.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker", "sampler"]  # no staging folder left
    assert zero["save_error"].startswith(("FileExistsError", "NotADirectoryError")), zero["save_error"]
    assert one["save_error"] == f"RuntimeError: rank 0 could not write {str(tmp_path / 'blocker' / 'inner')!r}; nothing was replaced"


def test_fsdp_bad_setup_is_a_one_line_error():
    model, _ = tiny_model_and_tokenizer(0)
    with pytest.raises(RuntimeError, match="needs an initialised process group"):
        FsdpLearner(model, CONFIG)
    with pytest.raises(ValueError, match="backend 'mpi': use one of"):
        check_backend("mpi")
    if not torch.distributed.is_nccl_available():
        with pytest.raises(RuntimeError, match="backend 'nccl' is not available"):
            run_local(_fsdp_worker, 2, args=("unused",), backend="nccl")
    # Rank 0 alone: the rendezvous gives up after its timeout instead of hanging.
    with pytest.raises(TimeoutError, match="2-process gloo group .* did not form within 1s"):
        init_process_group(0, GroupSettings(world_size=2, port=free_port(), timeout_s=1.0))


def _bf16_worker(rank: int, world: int) -> dict:
    """One rank of a bf16 (MixedPrecisionPolicy) step; this CPU's bf16 check is bypassed, as
    the tiny model is small enough for emulated bf16."""
    from sera.train import learner as learner_module

    learner_module.cpu_supports_bf16 = lambda: True
    learner = FsdpLearner(tiny_model_and_tokenizer(0)[0], LearnerConfig(**{**CONFIG.__dict__, "dtype": "bfloat16"}))
    fb = learner.forward_backward(_datums(), "cispo")
    learner.optim_step()
    return {"fb": fb, "weights": learner.full_weights()}


BF16_LOSS_RTOL = 1e-2
"""bf16 compute (8-bit mantissa) against the fp32 reference: the loss within 1% (5e-4 seen)."""


def test_bf16_mixed_precision_step_tracks_the_fp32_step():
    zero, _ = run_local(_bf16_worker, 2, timeout_s=240, threads_per_rank=1)
    model, _ = tiny_model_and_tokenizer(0)
    initial = {n: t.detach().clone() for n, t in model.state_dict().items()}
    reference = TorchLearner(model, CONFIG)
    fb = reference.forward_backward(_datums(), "cispo")
    reference.optim_step()
    assert zero["fb"].loss == pytest.approx(fb.loss, rel=BF16_LOSS_RTOL)
    assert all(t.dtype == torch.float32 for t in zero["weights"].values())  # fp32 masters
    # The bf16 update points the way of the fp32 one.
    got = torch.cat([(zero["weights"][n] - initial[n]).flatten() for n in initial])
    want = torch.cat([(reference.model.state_dict()[n] - initial[n]).flatten() for n in initial])
    cosine = float(torch.nn.functional.cosine_similarity(got, want, dim=0))
    print(f"bf16 loss {zero['fb'].loss:.5f} vs fp32 {fb.loss:.5f}; update cosine {cosine:.4f}")
    assert cosine > 0.95  # 0.984 seen
