"""`python -m slm.eval`: lm-eval's own command line with the `slm` model registered and the offline tasks
findable, the same program as `slm-lm-eval` (slm/cli/lm_eval.py, which documents it):

    python -m slm.eval run --model slm --model_args pretrained=runs/train/default --tasks slm_offline
    python -m slm.eval run --model slm --model_args pretrained=<run> --tasks hellaswag --limit 100

A `pretrained=` path may hold commas (a run directory named after its job key); the scores also go into
the run's result.json. A checkpoint that cannot be loaded, a missing path, or a hub task while the hub is
unreachable is one line on stderr and exit code 2, as with slm-eval (a traceback with HYDRA_FULL_ERROR=1).
This entry point is a command line, so it may use slm.cli (which writes the run record through slm.runs).
"""


def main() -> None:
    from slm.cli.lm_eval import main as lm_eval_main

    lm_eval_main(prog="python -m slm.eval")


if __name__ == "__main__":
    main()
