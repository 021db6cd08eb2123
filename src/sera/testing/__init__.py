"""The test kit: scripted and random stand-ins for a real policy, importable by tests, benchmarks
and docs (as `torch.testing` is), never used by the library itself.

`tiny`: a random tiny Qwen3 model with an in-process tokenizer. `sabotage`: a scripted policy
that makes a seeded share of agents give up at once (mixed counterfactual groups).
`rubric_oracle`: a scripted rubric writer and scorer. `tokenizing`: wraps a scripted policy so its
steps carry token ids, as a model's would.
"""
