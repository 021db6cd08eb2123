"""TextWorld-Sync: the paper's multi-agent cooking benchmark, where every agent of a tree acts at
the same time on one shared kitchen (inventory, tools, door and a budget of world actions are
shared; locations and histories are per agent). `spec` holds the task records, `world` (with
`state`, `actions`, `observation`) the simulator, `generator` and `tasks` the splits and task
files (ours and the authors' V9 via `reference_v9`), `env` and `prompts` one agent's text
protocol, `scorer` and `subtask` the programmatic checks, and `reference_plan`, `plan` and
`oracle` the scripted expert. See docs/textworld.md."""
