"""sera: train and evaluate recursive LLM agents (RAO and SERA)."""

__version__ = "0.1.0"
