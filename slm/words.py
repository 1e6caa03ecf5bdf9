"""Counted words for the sentences commands print: "1 configuration", "3 configurations", "1 pair is", "2 are".

Standard library only: any layer may use it (the sweepers, the runs, the analysis).
"""

from __future__ import annotations


def counted(n: int, word: str, many: str | None = None) -> str:
    """`n` and `word`, plural unless n is 1 (`many`: an irregular plural; else word + "s")."""
    return f"{n} {word if n == 1 else (many or word + 's')}"
