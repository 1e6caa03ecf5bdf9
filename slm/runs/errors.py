"""The error line a run record (`error`, `eval.lm_eval_error`) and a sweep's job outcome carry.

Standard library only: the sweeps (slm/sweeps, hydra_plugins/) and slm.runs.job import it without loading torch.
"""

from __future__ import annotations

NOISE = ("Config search path:",  # Hydra's dump of where it looked for configs
         "Error stream produced:")  # submitit: the job's stderr follows (its log has it)


def one_line(err: BaseException | str) -> str:
    """An error on one line: `<exception class>: <message>` (the class alone for an empty message); a string is
    its message. Whitespace is folded and what follows Hydra's search-path dump or submitit's stderr dump is
    left out."""
    text = str(err)
    for marker in NOISE:
        text = text.split(marker)[0]
    text = " ".join(text.split())
    if isinstance(err, BaseException):
        return f"{type(err).__name__}: {text}" if text else type(err).__name__
    return text
