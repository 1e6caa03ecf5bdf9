"""Counted words for the analyses' sentences: "1 configuration", "3 configurations", "1 pair"."""

from __future__ import annotations


def counted(n: int, word: str, many: str | None = None) -> str:
    """`n` and `word`, plural unless n is 1 (`many`: an irregular plural; else word + "s")."""
    return f"{n} {word if n == 1 else (many or word + 's')}"
