"""Policies: the scripted oracles live with their environments; model samplers live here."""
