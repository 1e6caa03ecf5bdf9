"""The files of the function-calling task (`slm-toolcall <dir>`), each written atomically (slm.atomic):

  corpus.txt, corpus_valid.txt     pretraining text: items (prompt + gold completion) separated by blank lines;
                                   the corpus's training items are not the SFT items (same distribution)
  sft_train.jsonl, sft_valid.jsonl TRL prompt/completion records (the completion ends with its newline)
  pairs_corrupt.jsonl, pairs_corrupt_valid.jsonl
                                   TRL prompt/chosen/rejected records: chosen the gold completion, rejected one
                                   corruption of it (slm.toolcall.corruptions; one mode per item, drawn among
                                   the chosen modes that apply; `mode` says which)
  items_<split>.jsonl              every split's items (slm.toolcall.items), for evaluation and teacher sampling
  manifest.json                    the settings and what each file holds

Records carry `id` and `kind` (and `mode`) beside TRL's fields; slm.data.preference_records ignores them.

    summary = write_task(Path("task"), TaskSizes(train=2000, corpus=2000, valid=200, test=500), seed=0)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from slm.atomic import atomic_write
from slm.toolcall.corruptions import MODES, pick
from slm.toolcall.items import EVAL_SPLITS, generate

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class TaskSizes:
    """How many items each file is made of."""

    train: int = 2000
    """SFT training records (and training pairs): the first items of the train split."""
    corpus: int = 2000
    """Items in corpus.txt: the train split's next items, after the SFT ones."""
    valid: int = 200
    """Validation items (sft_valid, pairs_corrupt_valid, corpus_valid)."""
    test: int = 500
    """Items of each evaluation split (items_test.jsonl, items_test_templates.jsonl, ...)."""


def document(item: dict) -> str:
    """An item as pretraining text: its prompt, the gold completion and the newline that ends it."""
    return item["prompt"] + item["answer"] + "\n"


def sft_record(item: dict) -> dict:
    return {"prompt": item["prompt"], "completion": item["answer"] + "\n", "id": item["id"], "kind": item["kind"]}


def pair_records(items: list[dict], modes, seed: int) -> tuple[list[dict], int]:
    """(TRL preference records, items without one: no chosen mode applies to them)."""
    records, skipped = [], 0
    for item in items:
        chosen = pick(item, modes, seed)
        if chosen is None:
            skipped += 1
            continue
        mode, text = chosen
        records.append({"prompt": item["prompt"], "chosen": item["answer"] + "\n", "rejected": text + "\n",
                        "id": item["id"], "kind": item["kind"], "mode": mode})
    return records, skipped


def write_lines(path: Path, lines) -> int:
    """Write text lines atomically; how many."""
    lines = list(lines)
    atomic_write(path, lambda f: f.write("".join(lines).encode("utf-8")))
    return len(lines)


def write_jsonl(path: Path, rows) -> int:
    return write_lines(path, (json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def write_task(out: Path, sizes: TaskSizes = TaskSizes(), seed: int = 0, modes=MODES) -> dict:
    """Write every file into `out` (made if missing); the manifest's contents."""
    out = Path(out)
    train = generate("train", seed, sizes.train + sizes.corpus)
    sft, corpus = train[:sizes.train], train[sizes.train:]
    valid = generate("valid", seed, sizes.valid)
    files: dict[str, dict] = {}
    out.mkdir(parents=True, exist_ok=True)
    for name, items in (("corpus.txt", corpus), ("corpus_valid.txt", valid)):
        atomic_write(out / name, lambda f, items=items: f.write("\n".join(map(document, items)).encode("utf-8")))
        files[name] = {"items": len(items)}
    for name, items in (("sft_train.jsonl", sft), ("sft_valid.jsonl", valid)):
        files[name] = {"records": write_jsonl(out / name, map(sft_record, items))}
    for name, items in (("pairs_corrupt.jsonl", sft), ("pairs_corrupt_valid.jsonl", valid)):
        records, skipped = pair_records(items, modes, seed)
        files[name] = {"records": write_jsonl(out / name, records), "items_without_a_pair": skipped,
                       "modes": {m: sum(r["mode"] == m for r in records) for m in modes}}
    for split, items in (("train", sft), ("valid", valid), *((s, generate(s, seed, sizes.test)) for s in EVAL_SPLITS)):
        files[f"items_{split}.jsonl"] = {"items": write_jsonl(out / f"items_{split}.jsonl", items)}
    manifest = {"task": "slm.toolcall", "seed": seed, "sizes": asdict(sizes), "corruptions": list(modes),
                "files": files}
    atomic_write(out / MANIFEST, lambda f: f.write((json.dumps(manifest, indent=2) + "\n").encode()))
    return manifest


def read_items(path: Path) -> list[dict]:
    """Items from an items_<split>.jsonl file; ValueError naming the file and line for anything else."""
    items = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read the items ({getattr(err, 'strerror', None) or err})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as err:
            raise ValueError(f"{path}:{number}: not JSON ({err})") from None
        missing = [k for k in ("id", "prompt", "answer", "calls", "tools", "result") if not isinstance(item, dict)
                   or k not in item]
        if missing:
            raise ValueError(f"{path}:{number}: not an item (missing {', '.join(missing)}; items_<split>.jsonl "
                             "from slm-toolcall)")
        items.append(item)
    if not items:
        raise ValueError(f"{path}: no items")
    return items
