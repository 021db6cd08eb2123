"""A tiny random Qwen3 model and an in-process tokenizer, for tests and benchmarks.

Nothing here touches the disk or a model hub: the tokenizer is a byte-level BPE trained on a
small built-in corpus (about 0.1 s) and wrapped as a `PreTrainedTokenizerFast` with a ChatML
chat template (eos = pad = `<|im_end|>`, as in Qwen and SmolLM2); the model is
`Qwen3ForCausalLM` built from a config with random weights (milliseconds). The weights are
random, so the text is gibberish, but every code path of a sampler (chat template, padding, KV
cache, stop strings, EOS, logprobs) runs exactly as with a real model.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Special tokens of the tiny tokenizer; `<|im_end|>` is the end-of-turn (eos) token."""

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""ChatML, the format of Qwen and SmolLM2 (without SmolLM2's default system prompt)."""

_CORPUS = (
    "You are an agent in a crafting game. Craft the target items from your inventory.",
    "<thought>I need planks first, then sticks.</thought>\n<python>craft('4 oak planks')</python>",
    "<python>print(get_inventory())</python>",
    "[Cell 1 Output]\nInventory: 3 oak logs, 2 iron ingots, 1 stick\nProvide your next action.",
    "result = await launch_subagent('craft 2 sticks', max_steps=10)\nfinish('done')",
    "Observation: You are in the kitchen. You see a fridge, a counter and a knife.",
    "<action>take knife</action> <delegate>{\"goal\": \"slice the carrot\"}</delegate>",
    "<finish>The meal is ready.</finish> Score: 1. Task Success. Done.",
    "The quick brown fox jumps over the lazy dog. 0123456789 + - * / = ( ) [ ] { } : ; , .",
    "def solve(task):\n    for item in task.items:\n        if item.count > 0:\n            return item\n",
    "What is the capital of France? The capital of France is Paris.",
    "Please rate the subtask on each criterion from 0 to 1 and give a final score.",
)
"""A small text sample of the agent formats, so that common strings get multi-byte tokens."""


def tiny_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with ChatML specials, trained in-process on `_CORPUS`."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Repeat the corpus so merges of the common agent strings reach the vocabulary.
    bpe.train_from_iterator(list(_CORPUS) * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        bos_token=None,
        unk_token=None,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def tiny_model_and_tokenizer(
    seed: int = 0,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int = 512,
    max_position_embeddings: int = 4096,
    initializer_range: float = 0.5,
) -> tuple[Qwen3ForCausalLM, PreTrainedTokenizerFast]:
    """A random `Qwen3ForCausalLM` in fp32 eval mode and its tokenizer.

    `initializer_range` is large on purpose: with the usual 0.02 a random model's next-token
    distribution is almost uniform, so greedy decoding would hinge on near-ties and a test of
    "batched greedy equals one-at-a-time greedy" would test float rounding, not the sampler.
    The global torch RNG is left untouched (`seed` drives a forked RNG).
    """
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_heads {num_heads}")
    tokenizer = tiny_tokenizer(vocab_size)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,  # Qwen3's default head_dim is 128 whatever the width
        max_position_embeddings=max_position_embeddings,
        initializer_range=initializer_range,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer
