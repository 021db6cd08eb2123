"""Model backends and the other policies an agent can run on (the scripted oracles live with
their environments, the test kit in `sera.testing`).

- samplers: `transformers_sampler` (in-process, with `batching` and `decoding`) and
  `openai_sampler` (vLLM or any OpenAI-compatible server);
- what they share: `context` (the one context policy), `errors` (named failures),
  `tokenizing` (chat-template ids);
- OpenAI-compatible HTTP, also used by the judge: `openai_http` (timeouts, retries, client) and
  `openai_replies` (reading replies);
- `human` (a person at the terminal), `factory` (the policy a command line asks for),
  `threaded` (a sampler on an event loop of its own), `models` (loading models, converting the
  embedded SmolLM2 GGUF).

Sampling for training (a local vLLM server, its LoRA adapter endpoints, the backends and the
weight sync) is `sera.serving`.
"""
