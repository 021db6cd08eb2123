"""`sera pipeline`: the main job. Evaluate the base model on a fixed held-out set, SFT warm start
on the scripted expert, evaluate, RL for the time that remains, evaluate, and write a report whose
sentences never claim more than the Wilson intervals allow (docs/pipeline.md).

One module per job: `job` (the phase order, resume, the budget's use), `phases` (what each phase
runs and when it is complete), `record` (`pipeline.json` and the one way a phase is run),
`budget` (RL's deadline), `evalset` (the fixed set and its settings), `evaluation` (one
evaluation through the harness), `evalstats` (what an evaluation folder says), `stats` (Wilson
intervals), `wording` (the sentences), `report` and `plot` (the outputs), `machine` (where it ran).
"""
