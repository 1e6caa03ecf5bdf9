"""`DataError`: bad data input (config, files, network); the message is one line naming the bad value."""

from __future__ import annotations


class DataError(ValueError):
    """Invalid data or tokenizer input; the one-line message names the value and what is allowed."""
