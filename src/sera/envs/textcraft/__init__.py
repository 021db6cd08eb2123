"""TextCraft-Synth: the paper's crafting benchmark, where agents write Python (CodeAct cells)
against a crafting API to turn an inventory into target items from a synthetic recipe book.
`recipes` builds the book, `task_generator` and `tasks` reproduce the published train/val
splits, `task_file` reads and writes their JSONL, `world` holds one shared inventory and the
tools' semantics, `env` and `prompts` one agent's CodeAct session, `verify` the success check of
root tasks and subtasks alike, and `solver` / `oracle` the scripted expert."""
