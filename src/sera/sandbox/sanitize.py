"""Cell output made safe for JSON and terminals: `clean_text` and `clean_value` now live in
`sera.text_safety` (evaluation uses them too); re-exported here for the sandbox's modules."""

from sera.text_safety import clean_text, clean_value

__all__ = ["clean_text", "clean_value"]
