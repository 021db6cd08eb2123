"""The one error type of evaluation setup problems (the CLI prints its message as one line)."""

from __future__ import annotations


class EvalSetupError(ValueError):
    """`--out` cannot be used as asked: not a writable folder, the old layout, another run's
    fingerprint, locked by another evaluation. The message is one line naming the path."""
