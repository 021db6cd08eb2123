"""The learner (`sera.train.learner`) and its micro-batching (`sera.train.batching`) on the tiny model."""

from __future__ import annotations

import math
import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from sera.testing.tiny import tiny_model_and_tokenizer
from sera.checkpoints import lora as lora_module
from sera.train import batching, learner as learner_module
from sera.train.batching import make_microbatch, microbatches, plan_microbatches
from sera.train.datums import Datum
from sera.train.learner import Learner, LearnerConfig, LoraSettings, TorchLearner
from sera.train.logprobs import sequence_logprobs as full_forward_logprobs

NAN = math.nan


def datum(tokens, mask, sampler=None, advantage=1.0, weight=1.0, name="t") -> Datum:
    sampler = sampler if sampler is not None else [NAN] * len(tokens)
    return Datum(
        tokens=tuple(tokens), mask=tuple(bool(m) for m in mask), sampler_logprobs=tuple(sampler),
        advantage=advantage, weight=weight, depth=0, trajectory_id=name, node_id=name, stage="execution", steps=(),
    )


def random_datums(n: int, seed: int = 0, lengths=(9, 14, 23, 31, 40)) -> list[Datum]:
    """Datums of mixed lengths; prompt untrained, interleaved trained/untrained completion,
    sampler logprobs near the truth for some, NaN for others."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = lengths[i % len(lengths)]
        tokens = [rng.randrange(3, 500) for _ in range(length)]
        mask = [False] * 3 + [rng.random() < 0.7 for _ in range(length - 3)]
        sampler = [(-rng.uniform(0.5, 8.0) if m and i % 3 else NAN) for m in mask]
        out.append(datum(tokens, mask, sampler, advantage=rng.uniform(-1.5, 1.5), weight=rng.uniform(0.5, 2.0), name=f"d{i}"))
    return out


def make_learner(seed: int = 0, **options) -> TorchLearner:
    model, tokenizer = tiny_model_and_tokenizer(seed)
    options.setdefault("lr", 1e-3)
    return TorchLearner(model, LearnerConfig(**options), tokenizer=tokenizer)


def grads(learner: TorchLearner) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.requires_grad}


def params(learner: TorchLearner) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in learner.model.named_parameters()}


def assert_close_dicts(a, b, atol=1e-6, rtol=1e-6):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=rtol, msg=lambda m, n=name: f"{n}: {m}")


# -- batching ------------------------------------------------------------------------------------


def test_plan_packs_longest_first_under_the_budget_and_isolates_oversized():
    lengths = [5, 50, 20, 20, 7, 120, 19]
    groups = plan_microbatches(lengths, max_tokens=60)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert groups[0] == [5]  # 120 > budget: alone
    for group in groups:
        width = max(lengths[i] for i in group)
        assert len(group) == 1 or len(group) * width <= 60
        assert [lengths[i] for i in group] == sorted((lengths[i] for i in group), reverse=True)
    with pytest.raises(ValueError, match=">= 1"):
        plan_microbatches([3], 0)


def test_microbatch_gathers_trained_positions_and_drops_untrained_datums():
    first = datum([7, 8, 9, 10], [0, 1, 0, 1], [NAN, -1.0, NAN, NAN], advantage=2.0, weight=0.5)
    idle = datum([1, 2, 3], [0, 0, 0])
    second = datum([4, 5], [0, 1], [NAN, -3.0], advantage=-1.0)
    [batch] = microbatches([first, idle, second], 100, pad_id=0)
    assert batch.datum_indices == (0, 2)
    assert batch.input_ids.tolist() == [[7, 8, 9, 10], [4, 5, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch.rows.tolist() == [0, 0, 1] and batch.cols.tolist() == [0, 2, 0]
    assert batch.targets.tolist() == [8, 10, 5]
    assert batch.advantages.tolist() == [1.0, 1.0, -1.0]  # advantage × weight
    assert batch.sampler_logprobs[0] == -1.0 and math.isnan(batch.sampler_logprobs[1])
    assert batching.trained_token_count([batch]) == 3 and batch.padded_tokens == 8 and batch.real_tokens == 6
    with pytest.raises(ValueError, match="first token"):
        microbatches([datum([1, 2], [1, 1])], 10)


# -- the masked head --------------------------------------------------------------------------------


def test_masked_head_matches_a_full_forward():
    learner = make_learner()
    model = learner.model.eval()
    for prompt, completion in (([5, 6, 7], [8, 9, 10, 11]), ([40] * 12, [3, 300, 7])):
        masked = learner.sequence_logprobs(prompt, completion)
        with torch.no_grad():
            full = full_forward_logprobs(model, prompt, completion)
        torch.testing.assert_close(masked, full, atol=1e-5, rtol=0)
    # Padded rows and interleaved masks, against one full forward per datum.
    data = random_datums(4, seed=3)
    [batch] = microbatches(data, 10_000)
    with torch.no_grad():
        got = learner.token_logprobs(batch)
        expected = []
        for d in (data[i] for i in batch.datum_indices):  # rows are sorted by length
            logits = model(input_ids=torch.tensor([d.tokens])).logits[0].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            expected += [logprobs[i - 1, d.tokens[i]] for i, m in enumerate(d.mask) if m]
    torch.testing.assert_close(got, torch.stack(expected), atol=1e-5, rtol=0)


# -- normalisation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["cispo", "ppo_clip", "sft"])
def test_microbatching_gives_the_gradient_of_one_big_batch(loss):
    data = random_datums(7)
    whole = make_learner(max_tokens_per_microbatch=100_000)
    split = make_learner(max_tokens_per_microbatch=45)
    one = whole.forward_backward(data, loss)
    many = split.forward_backward(data, loss)
    assert one.microbatches == 1 and many.microbatches >= 4
    assert one.trained_tokens == many.trained_tokens == sum(d.n_trainable for d in data)
    assert many.loss == pytest.approx(one.loss, rel=1e-6, abs=1e-6)
    # fp32 summation order differs between the two: 1e-6, absolute plus relative to the gradient.
    assert_close_dicts(grads(whole), grads(split), atol=1e-6, rtol=1e-6)


def test_loss_is_the_token_mean_over_the_step():
    learner = make_learner()
    data = random_datums(5)
    stats = learner.forward_backward(data, "pg")
    lp = [learner.sequence_logprobs(d.tokens[: i], [d.tokens[i]])[0] for d in data for i, m in enumerate(d.mask) if m]
    adv = [d.advantage * d.weight for d in data for m in d.mask if m]
    expected = -sum(a * float(x) for a, x in zip(adv, lp)) / len(lp)
    assert stats.loss == pytest.approx(expected, abs=1e-5)


def test_zero_weight_datums_add_no_gradient_but_count_in_the_denominator():
    data = random_datums(3)
    zero = [d.with_weight(0.0) for d in random_datums(2, seed=9)]
    alone, mixed = make_learner(), make_learner()
    a = alone.forward_backward(data, "cispo")
    b = mixed.forward_backward(data + zero, "cispo")
    share = a.trained_tokens / b.trained_tokens
    assert share < 1
    assert_close_dicts({n: g * share for n, g in grads(alone).items()}, grads(mixed), atol=1e-6)
    # A step of weight-0 datums only leaves the weights exactly as they were.
    idle = make_learner(weight_decay=0.0)
    before = params(idle)
    stats = idle.train_step(zero, "cispo")
    assert stats.optim.grad_norm == 0.0
    after = params(idle)
    assert all(torch.equal(before[n], after[n]) for n in before)


# -- the loss sign ----------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["cispo", "pg"])
def test_positive_advantage_raises_and_negative_lowers_the_logprob(loss):
    prompt, completion = [5, 6, 7, 8], [20, 21, 22, 23, 24]
    tokens = prompt + completion
    mask = [0] * len(prompt) + [1] * len(completion)
    for sign in (1.0, -1.0):
        learner = make_learner(lr=3e-3, weight_decay=0.0)
        before = float(learner.sequence_logprobs(prompt, completion).sum())
        # Sampler logprobs from the current weights: ratio 1, as on-policy.
        sampler = [NAN] * len(prompt) + learner.sequence_logprobs(prompt, completion).tolist()
        learner.train_step([datum(tokens, mask, sampler, advantage=sign)], loss)
        after = float(learner.sequence_logprobs(prompt, completion).sum())
        assert (after - before) * sign > 0, (sign, before, after)


def test_sft_step_lowers_the_nll_and_reports_it():
    learner = make_learner(lr=3e-3, weight_decay=0.0)
    prompt, completion = [9, 10, 11], [30, 31, 32, 33]
    d = datum(prompt + completion, [0, 0, 0, 1, 1, 1, 1], advantage=0.0)
    nll = -float(learner.sequence_logprobs(prompt, completion).mean())
    stats = learner.train_step([d], "sft")
    assert stats.forward_backward.loss == pytest.approx(nll, abs=1e-5)
    assert -float(learner.sequence_logprobs(prompt, completion).mean()) < nll


# -- statistics ----------------------------------------------------------------------------------------


def test_step_stats_ratio_and_gap_use_only_tokens_with_sampler_logprobs():
    learner = make_learner()
    prompt, completion = [5, 6, 7], [8, 9, 10, 11]
    current = learner.sequence_logprobs(prompt, completion).tolist()
    # Two tokens with sampler values offset by +0.2 and -0.05, two without (ratio 1, not counted).
    sampler = [NAN] * 3 + [current[0] + 0.2, current[1] - 0.05, NAN, NAN]
    stats = learner.train_step([datum(prompt + completion, [0, 0, 0, 1, 1, 1, 1], sampler)], "cispo")
    fb = stats.forward_backward
    assert fb.trained_tokens == 4 and fb.sampler_tokens == 2 and fb.microbatches == 1
    assert fb.logprob_gap == pytest.approx(0.125, abs=1e-4)
    assert fb.ratio_max == pytest.approx(math.exp(0.05), abs=1e-4)
    assert fb.ratio_mean == pytest.approx((math.exp(-0.2) + math.exp(0.05)) / 2, abs=1e-4)
    assert fb.ratio_outside == 0.5
    assert stats.optim.step == 1 and stats.optim.lr == 1e-3 and stats.optim.grad_norm > 0
    assert stats.tokens_per_s > 0 and stats.peak_memory_bytes > 0
    assert {"loss", "grad_norm", "tokens_per_s", "kl_k3"} <= stats.as_dict().keys()


# -- state and saving ---------------------------------------------------------------------------------


@pytest.mark.parametrize("lora", [None, LoraSettings(rank=4, alpha=8)])
def test_state_dict_round_trip_gives_identical_next_steps(lora):
    first, second = random_datums(4, seed=1), random_datums(4, seed=2)
    original = make_learner(lora=lora)
    original.train_step(first, "cispo")
    snapshot = original.state_dict()
    expected = original.train_step(second, "cispo")
    restored = make_learner(seed=0, lora=lora)
    restored.load_state_dict(snapshot)
    got = restored.train_step(second, "cispo")
    assert got.forward_backward == expected.forward_backward
    assert got.optim == expected.optim
    a, b = params(original), params(restored)
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert isinstance(restored, Learner)


def test_save_for_sampler_full_weights_reload_and_replace(tmp_path):
    learner = make_learner()
    learner.train_step(random_datums(2), "cispo")
    target = tmp_path / "weights" / "v000001"
    learner.save_for_sampler(target)
    learner.save_for_sampler(target)  # replaces the folder
    assert sorted(p.name for p in target.parent.iterdir()) == ["v000001"]  # no temp folders left
    assert (target / "model.safetensors").is_file() and (target / "config.json").is_file()
    reloaded = AutoModelForCausalLM.from_pretrained(target).eval()
    with torch.no_grad():
        reference = full_forward_logprobs(reloaded, [5, 6, 7], [8, 9])
    torch.testing.assert_close(learner.sequence_logprobs([5, 6, 7], [8, 9]), reference, atol=1e-5, rtol=0)
    # A saved folder loads as a learner by path, with its tokenizer; a weights-only folder too.
    again = TorchLearner.load(target, LearnerConfig())
    assert again.tokenizer is not None
    torch.testing.assert_close(again.sequence_logprobs([5, 6, 7], [8, 9]), reference, atol=1e-5, rtol=0)
    again.tokenizer = None
    bare = again.save_for_sampler(tmp_path / "bare")
    assert TorchLearner.load(bare).tokenizer is None


def test_save_for_sampler_lora_writes_an_adapter(tmp_path):
    learner = make_learner(lora=LoraSettings(rank=4))
    trainable = sum(p.numel() for p in learner.model.parameters() if p.requires_grad)
    assert 0 < trainable < sum(p.numel() for p in learner.model.parameters()) / 4
    learner.train_step(random_datums(2), "cispo")
    target = learner.save_for_sampler(tmp_path / "adapter")
    assert (target / "adapter_model.safetensors").is_file() and (target / "adapter_config.json").is_file()
    assert not (target / "model.safetensors").exists()


# -- options that must not change the numbers ---------------------------------------------------------


def test_head_chunks_and_gradient_checkpointing_give_the_same_gradient():
    data = random_datums(4)
    plain = make_learner()
    plain.forward_backward(data, "cispo")
    for options in ({"head_chunk_tokens": 7}, {"gradient_checkpointing": True}):
        other = make_learner(**options)
        other.forward_backward(data, "cispo")
        # Chunks sum the tied head/embedding gradient in another order: float32 noise only.
        assert_close_dicts(grads(plain), grads(other), atol=1e-5, rtol=1e-5)


# -- errors -----------------------------------------------------------------------------------------------


def test_missing_path_and_path_without_config_are_one_line_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist") as missing:
        TorchLearner.load(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no config.json") as empty:
        TorchLearner.load(tmp_path)
    assert "\n" not in str(missing.value) and "\n" not in str(empty.value)


@pytest.mark.skipif(learner_module.cpu_supports_bf16(), reason="this CPU supports bf16")
def test_bf16_refused_on_a_cpu_without_native_bf16():
    with pytest.raises(RuntimeError, match="AVX-512 BF16 or AMX"):
        make_learner(dtype="bfloat16")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available")
def test_cuda_without_cuda_is_an_error():
    with pytest.raises(RuntimeError, match="no CUDA"):
        make_learner(device="cuda")


def test_config_errors(monkeypatch):
    with pytest.raises(ValueError, match="unknown loss"):
        make_learner(loss="kl")
    with pytest.raises(ValueError, match="dtype"):
        make_learner(dtype="float16")
    learner = make_learner()
    with pytest.raises(ValueError, match="unknown loss"):
        learner.forward_backward(random_datums(1), "dpo")
    monkeypatch.setattr(lora_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match="peft"):
        make_learner(lora=LoraSettings())


def test_bf16_autocast_runs_where_supported():
    if not (learner_module.cpu_supports_bf16() or torch.cuda.is_available()):
        pytest.skip("no bf16-capable CPU or CUDA device here")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    learner = make_learner(dtype="bfloat16", device=device)
    stats = learner.train_step(random_datums(3), "cispo")
    assert math.isfinite(stats.forward_backward.loss) and stats.optim.grad_norm > 0
    assert next(learner.model.parameters()).dtype == torch.float32  # fp32 master weights


def test_make_microbatch_single_probe():
    batch = make_microbatch([datum([1, 2, 3], [0, 1, 1])], [0])
    assert batch.trained_tokens == 2 and batch.cols.tolist() == [0, 1]
