"""Training data and maths: recorded trees become datums (`datums`, `spans`, `stage_data`), the
policy losses (`losses`), the stage schedule (`schedule`), the methods as presets (`method`),
collection of one training rollout per stage (`collect`) and the learner's log-probability
recompute (`logprobs`). There is no learner loop yet; the launchers it uses are `sera.launchers`."""
