"""Which source made a record: the git lookups of the run record's environment and of lm-eval's results JSON.

    git_revision()        HEAD of the repository holding the slm package (-dirty with local changes): the run
                          record's environment.git_revision (slm.runs.environment)
    git_commit_hash()     `git describe --always` in the working directory: lm-eval's `git_hash`
    with quiet_git_lookup(): ...   lm-eval asks git_commit_hash instead of its own lookup

Neither lets git print to stderr ("fatal: not a git repository"): without git or a repository the answer is None.
Standard library only (lm-eval is imported by quiet_git_lookup when it runs), so that slm.runs (above this layer)
and slm.eval share it.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path


def git_revision() -> str | None:
    """HEAD of the repository holding the slm package (with -dirty if it has local changes), or None."""
    src = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return rev.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit_hash() -> str | None:
    """What lm-eval records as `git_hash` (`git describe --always` in the working directory), asked without
    letting git print "fatal: not a git repository" to stderr when there is none: then None."""
    try:
        done = subprocess.run(["git", "describe", "--always"], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):  # no git, or it hangs
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


@contextlib.contextmanager
def quiet_git_lookup():
    """lm-eval's own git lookup (lm_eval.evaluator.get_git_commit_hash, which lets git write to stderr)
    replaced by git_commit_hash while the block runs."""
    import lm_eval.evaluator

    saved = lm_eval.evaluator.get_git_commit_hash
    lm_eval.evaluator.get_git_commit_hash = git_commit_hash
    try:
        yield
    finally:
        lm_eval.evaluator.get_git_commit_hash = saved
