"""Environments: TextCraft-Synth (and TextWorld-Sync in a later release)."""
