"""Evaluation: run a policy over a task set, save every tree, summarise."""
