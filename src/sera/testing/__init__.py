"""The test kit: scripted and random stand-ins for a real policy, importable by tests, benchmarks
and docs (as `torch.testing` is), never imported by the library itself (`scripts/import_cycles.py`
fails CI on such an import).

`tiny`: a random tiny Qwen3 model with an in-process tokenizer, which the library reaches only by
name through the `sera.models` entry point this project's metadata registers
(`sera.policy.model_registry`). `sabotage`: a scripted policy that makes a seeded share of agents
give up at once (mixed counterfactual groups). The scripted rubric writer and scorer and the
token-stamping wrapper are product parts (SFT builds demonstrations with them):
`sera.rubric.scripted` and `sera.policy.tokenizing_policy`.
"""
