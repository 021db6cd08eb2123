"""Training: recorded trees become datums (`datums`, `spans`, `stage_data`); the losses (`losses`),
the learner behind a narrow seam (`learner`, `batching`), the stage schedule (`schedule`), methods
as presets (`method`), validated configs (`config`), atomic checkpoints (`checkpoint`), collection
of one training rollout per stage (`collect`), the loop and its records (`loop`, `metrics`) and the
learner-side log-probability recompute (`logprobs`). The launchers the loop uses are
`sera.launchers`. See `docs/training.md` for what the loop does not do yet."""
