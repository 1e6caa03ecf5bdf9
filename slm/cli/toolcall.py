"""`slm-toolcall <out dir>`: the files of the verifiable function-calling task (docs/toolcall.md).

    slm-toolcall task/                                    # corpus, SFT records, corruption pairs, items of every split
    slm-toolcall task/ --train 500 --test 200 --seed 1
    slm-toolcall task_wrong_tool/ --corruptions wrong_tool     # pairs whose rejected side names a wrong tool only

Writes corpus.txt, corpus_valid.txt, sft_train.jsonl, sft_valid.jsonl, pairs_corrupt.jsonl,
pairs_corrupt_valid.jsonl, items_<split>.jsonl for every split and manifest.json, each atomically; prints one line per
file. Bad input (a count below 1, an unknown corruption, an output path that is a file) is one line on stderr and
exit code 2, with nothing written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slm.bad_input import comma_choices, doc_parser, whole_number
from slm.pipes import quiet_on_closed_pipe

PROG = "slm-toolcall"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from slm.toolcall.corruptions import MODES
    from slm.toolcall.files import TaskSizes

    sizes = TaskSizes()
    parser = doc_parser(PROG, __doc__)
    parser.add_argument("out", type=Path, help="directory to write into (made if missing; its files are replaced)")
    parser.add_argument("--train", type=whole_number(1), default=sizes.train, help=f"SFT records and training pairs (default "
                        f"{sizes.train})")
    parser.add_argument("--corpus", type=whole_number(1), default=sizes.corpus, help=f"items in corpus.txt, other training "
                        f"items than the SFT ones (default {sizes.corpus})")
    parser.add_argument("--valid", type=whole_number(1), default=sizes.valid, help=f"validation items (default {sizes.valid})")
    parser.add_argument("--test", type=whole_number(1), default=sizes.test, help=f"items of each evaluation split (default "
                        f"{sizes.test}: the lm-eval tasks' documents at seed 0)")
    parser.add_argument("--seed", type=whole_number(0), default=0, help="generator seed (default 0)")
    parser.add_argument("--corruptions", type=comma_choices(MODES), default=list(MODES),
                        help=f"the pairs' failure modes, comma-separated (default all: {','.join(MODES)})")
    return parser.parse_args(argv)


def run(argv: list[str] | None = None) -> dict:
    """Write the files; the manifest."""
    args = parse_args(argv)
    from slm.cli.paths import write_files
    from slm.toolcall.files import TaskSizes, write_task

    return write_files(PROG, args.out, "the task's files", lambda out: write_task(
        out, TaskSizes(args.train, args.corpus, args.valid, args.test), args.seed, args.corruptions))


@quiet_on_closed_pipe
def main() -> None:
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
