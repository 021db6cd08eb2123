"""Environments: TextCraft-Synth (`textcraft`) and TextWorld-Sync (`textworld`), the registry that
names them with every fact the rest of sera needs (`registry`), task selection (`selection`), task
lookup by id (`task_lookup`) and the shared JSONL task-file reader (`task_file`)."""
