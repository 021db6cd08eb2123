"""Training: recorded trees become datums (`datums`, `spans`, `stage_data`); the losses (`losses`),
the learner behind a narrow seam (`learner`, `batching`), the stage schedule (`schedule`), methods
as presets (`method`), validated configs (`config`), atomic checkpoints (`checkpoint`), collection
of one training rollout per stage (`collect`), the loop and its records (`loop`, `metrics`) and the
learner-side log-probability recompute (`logprobs`), the loop's side of sampling (`sampling`:
seeded, versioned policies; `infra`: rounds with infrastructure failures are sampled again;
`sampler_setup`: the config turned into a `sera.serving` backend). The sampler backends and the
weight sync themselves are `sera.serving`; the launchers the loop uses are `sera.launchers`. See
`docs/training.md` for what the loop does not do yet."""
