"""lm-eval's own command line with the `slm` model registered and the offline tasks findable:

    python -m slm.eval run --model slm --model_args pretrained=runs/train/default --tasks slm_offline
    python -m slm.eval run --model slm --model_args pretrained=<run> --tasks hellaswag --limit 100

(lm-eval 0.4 has no plugin entry point for models, so `lm_eval --model slm` alone cannot find it.)
Without --include_path, slm/eval/tasks is added; with one, add slm/eval/tasks yourself to keep them.
A checkpoint that cannot be loaded (slm.model.weights.CheckpointError: a bad config.json, weights that are
not safetensors, a model too large for memory) or a missing path is one line on stderr and exit code 2,
as with slm-eval (a traceback with HYDRA_FULL_ERROR=1).
"""

import os
import sys

import slm.eval.lm  # noqa: F401 - registers the `slm` model
from slm.eval import TASKS_DIR


def main() -> None:
    from lm_eval.__main__ import cli_evaluate

    argv = sys.argv[1:]
    if argv and argv[0] not in ("ls", "validate", "-h", "--help") and "--include_path" not in argv:
        argv += ["--include_path", str(TASKS_DIR)]  # `run`, or the legacy form without a subcommand
    sys.argv = [sys.argv[0], *argv]
    from slm.model.weights import CheckpointError

    try:
        cli_evaluate()
    except (CheckpointError, FileNotFoundError) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"python -m slm.eval: error: {' '.join(str(err).split())}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
