"""`slm-probes <out dir>`: the synthetic probes' files (MAD's six tasks as prompt/completion records, docs/probes.md).

    slm-probes probes/                                  # every task: 8000 train and 256 valid records each, seed 0
    slm-probes probes/ --tasks recall,compression --train 2000 --seed 1

Writes <task>_train.jsonl and <task>_valid.jsonl for each task and manifest.json, each atomically; prints one line
per file. Bad input (a count
below 1, an unknown task, an output path that is a file) is one line on stderr and exit code 2, with nothing
written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slm.bad_input import comma_choices, doc_parser, whole_number
from slm.pipes import quiet_on_closed_pipe

PROG = "slm-probes"


MOST = 1_000_000
"""Records per split at most."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from slm.probes.files import ProbeSizes
    from slm.probes.tasks import TASKS

    sizes = ProbeSizes()
    parser = doc_parser(PROG, __doc__)
    parser.add_argument("out", type=Path, help="directory to write into (made if missing; its files are replaced)")
    parser.add_argument("--tasks", type=comma_choices(TASKS), default=list(TASKS), help=f"comma-separated (default all: "
                        f"{','.join(TASKS)})")
    parser.add_argument("--train", type=whole_number(1, MOST), default=sizes.train, help=f"training records per task (default "
                        f"{sizes.train})")
    parser.add_argument("--valid", type=whole_number(1, MOST), default=sizes.valid, help=f"validation records per task (default "
                        f"{sizes.valid})")
    parser.add_argument("--seed", type=whole_number(0), default=0, help="generator seed (default 0)")
    return parser.parse_args(argv)


def run(argv: list[str] | None = None) -> dict:
    """Write the files; the manifest."""
    args = parse_args(argv)
    from slm.cli.paths import write_files
    from slm.probes.files import ProbeSizes, write_probes

    return write_files(PROG, args.out, "the probes' files", lambda out: write_probes(
        out, ProbeSizes(args.train, args.valid), args.seed, args.tasks), errors=(OSError, ValueError))


@quiet_on_closed_pipe
def main() -> None:
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
