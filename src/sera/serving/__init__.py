"""Where the policy being trained is sampled, behind one interface for every sampler.

- `backends`: `SamplerBackend` (what the training loop needs: a policy, a weight sync, recovery
  after an infrastructure failure) and the in-process backend, a `TransformersSampler` sharing
  the learner's module;
- `vllm_backend`: the vLLM backend (a server serving the base model, the policy as a hot-loaded
  LoRA adapter), from plain `VllmSettings`;
- `weight_sync` (the seam and the canary) and `vllm_sync` (LoRA hot-loading) beside them;
- `vllm_server` (launching, watching and restarting a local vLLM) and `vllm_admin` (its adapter
  endpoints);
- `errors`: `ServingError`, `InfraFailure`.

It builds on `sera.policy` (the samplers), `sera.runtime` and `sera.types`, and never imports the
trainer: `sera.train.sampler_setup` turns the trainer's config into the values passed here.
"""
