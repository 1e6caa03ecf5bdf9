"""`make dpo`'s answer (docs/dpo.md): each family x arm of the DPO study, scored on the function-calling task.

    python -m analysis.dpo runs/dpo/runs -o runs/dpo/dpo.md      # also runs/dpo/dpo.json

Reads result files only: each completed run's result.json and its per-item scores (analysis.paired.load_documents) in
the study's run groups (ARMS: dpo_sft, dpo_control, dpo_arms, dpo_onpolicy, dpo_orpo, dpo_rft). An arm is its run
group, and in dpo_arms its preference loss and beta (`dpo b=0.1`, `dpo+sft b=0.1`, `ipo b=0.1`; `on-policy dpo
b=0.1`). Where a family x arm was trained at several lrs (hydra.sweeper.lr_search), the lr of lowest mean validation
NLL (the held-out gold or chosen completions: best_lr) is kept; the test items never choose it. Per family x arm x
split: exact_match and format_valid with a 95% interval resampling seeds and items (two-level bootstrap), and against
the SFT arm of the same family: the paired difference pooled over seeds (analysis.paired.paired_groups: its bootstrap
interval over items and its p) and McNemar's exact test per seed (each seed's run against SFT's run of that seed, item
by item)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from analysis.paired import PairedError, load_documents, mcnemar, paired_groups

ARMS = {"dpo_sft": "sft", "dpo_control": "sft_control", "dpo_arms": None, "dpo_onpolicy": None, "dpo_orpo": "orpo",
        "dpo_rft": "rft"}
SPLITS = ("slm_toolcall", "slm_toolcall_templates", "slm_toolcall_long", "slm_toolcall_combos")
METRICS = ("exact_match", "format_valid")
DRAWS, SEED, ALPHA = 2000, 0, 0.05
PUBLISHED = [
    ("arXiv 2410.18890", "the claim's source: a small model trained by DPO on a teacher's correct and incorrect "
     "function calls matches much larger models where SFT alone does not",
     "small models; sizes not checked here (see the paper)"),
    ("arXiv 2407.08400", "offline SFT ~ DPO/KTO/IPO; online preference optimisation +25.9% vs +13.9% more correct "
     "results", "3B"),
    ("arXiv 2603.20100", "DPO adds little over strong SFT", "GPT-2 124M"),
    ("arXiv 2305.18290", "DPO above SFT on the chosen completions (the DPO paper's SFT-on-chosen baseline)",
     "up to 6B"),
]


def arm_name(group: str, config: dict) -> str:
    """The arm of a run of `group` with `config` (its record's config)."""
    if ARMS.get(group):
        return ARMS[group]
    pref = (config.get("train") or {}).get("preference") or {}
    name = f"{'+'.join(pref.get('loss') or ['dpo'])} b={pref.get('beta')}"
    return f"on-policy {name}" if group == "dpo_onpolicy" else name


def read_runs(root: Path) -> list[dict]:
    """Every completed, scored run of the study's run groups under `root` ($SLM_RUNS of `make dpo`)."""
    from slm.runs.record import load_record

    runs = []
    for group in ARMS:
        for run_dir in sorted((root / group).glob("*/")):
            record = load_record(run_dir) if (run_dir / "result.json").is_file() else None
            if not record or record.get("status") != "completed":
                continue
            config = record.get("config") or {}
            try:
                docs = load_documents(run_dir)
            except PairedError:
                continue
            runs.append({"dir": run_dir, "arm": arm_name(group, config),
                         "family": (config.get("model") or {}).get("family"),
                         "seed": (config.get("train") or {}).get("seed"), "lr": (config.get("train") or {}).get("lr"),
                         "selection_nll": (record.get("eval") or {}).get("val_nll"),
                         "tokens": (record.get("training") or {}).get("tokens"), "docs": docs})
    return runs


def best_lr(runs: list[dict]) -> list[dict]:
    """Each family x arm at its lr of lowest mean validation NLL over seeds (all of it where one lr was trained): the
    held-out gold (SFT) or chosen (preference) completions' NLL, the one yardstick every arm shares. Not the
    preference loss: in a probe (docs/dpo.md) it picked the lr at which DPO lost the format."""
    cells = defaultdict(lambda: defaultdict(list))
    for r in runs:
        cells[(r["family"], r["arm"])][r["lr"]].append(r)
    kept = []
    for by_lr in cells.values():
        def mean_nll(lr):
            values = [r["selection_nll"] for r in by_lr[lr] if isinstance(r["selection_nll"], (int, float))]
            return float(np.mean(values)) if values else float("inf")
        kept += by_lr[min(by_lr, key=mean_nll)]
    return kept


def scores(run: dict, task: str, metric: str) -> dict:
    """{doc_id: 0/1} of `metric` on `task` in `run` ({} where the run did not score the task)."""
    docs = run["docs"].tasks.get(task)
    if docs is None:
        return {}
    return {k[1]: float(line[f"{metric},none"]) for k, line in docs.documents.items()
            if k[0] == task and isinstance(line.get(f"{metric},none"), (int, float))}


def interval(matrix: np.ndarray, draws: int = DRAWS, seed: int = SEED) -> tuple[float, float]:
    """95% percentile interval of the mean of a seeds x items matrix, seeds and items resampled (two levels)."""
    rng = np.random.default_rng(seed)
    s, n = matrix.shape
    means = np.empty(draws)
    for i in range(draws):
        rows = matrix[rng.integers(0, s, s)]
        means[i] = rows[:, rng.integers(0, n, n)].mean()
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def cell(runs: list[dict], sft: list[dict], task: str, metric: str) -> dict | None:
    """One family x arm x split x metric: the mean with its interval, and against SFT (None without scores)."""
    per_run = [scores(r, task, metric) for r in runs]
    common = sorted(set.intersection(*(set(s) for s in per_run))) if per_run else []
    if not common:
        return None
    matrix = np.array([[s[d] for d in common] for s in per_run])
    low, high = interval(matrix)
    tokens = [r["tokens"] for r in runs if isinstance(r["tokens"], (int, float))]
    out = {"runs": len(runs), "items": len(common), "mean": float(matrix.mean()), "low": low, "high": high,
           "tokens": float(np.mean(tokens)) if tokens else None}
    if sft and runs is not sft:
        out["vs_sft"] = versus(runs, sft, task, metric)
    return out


def versus(runs: list[dict], sft: list[dict], task: str, metric: str) -> dict | None:
    """The arm against SFT: pooled over seeds (paired_groups) and McNemar per seed (the seeds both have)."""
    try:
        pooled = paired_groups([r["dir"] for r in sft], [r["dir"] for r in runs], task, f"{metric},none")
    except PairedError:
        return None
    by_seed = {r["seed"]: r for r in sft}
    seeds = []
    for r in runs:
        if r["seed"] not in by_seed:
            continue
        a, b = scores(by_seed[r["seed"]], task, metric), scores(r, task, metric)
        common = sorted(set(a) & set(b))
        n01, n10, p = mcnemar(np.array([a[d] for d in common]), np.array([b[d] for d in common]))
        seeds.append({"seed": r["seed"], "n01": n01, "n10": n10, "p": p})
    return {"diff": pooled.diff, "low": pooled.low, "high": pooled.high, "p": pooled.p, "test": pooled.test,
            "seeds": seeds}


def teacher(root: Path) -> dict:
    """The teacher's scores (dpo_teacher_sft's record) and its pairs' summary (slm-pairs, beside the runs), where
    they are."""
    from slm.runs.record import load_record

    out = {}
    for run_dir in sorted((root / "dpo_teacher_sft").glob("*/result.json")):
        record = load_record(run_dir.parent) or {}
        out["params"] = (record.get("model") or {}).get("params_total")
        out["exact_match"] = ((record.get("eval") or {}).get("lm_eval") or {}).get("scores")
    summary = root.parent / "teacher_pairs.summary.json"
    if summary.is_file():
        pairs = json.loads(summary.read_text())
        out["pairs"] = {k: pairs.get(k) for k in ("k", "temperature", "prompts", "pairs", "no_pair", "correct_rate",
                                                   "correct_records")}
    return out


def study(root: Path) -> dict:
    """Every family x arm x split x metric (the cells), and the arms and families found."""
    runs = best_lr(read_runs(root))
    groups = defaultdict(list)
    for r in runs:
        groups[(r["family"], r["arm"])].append(r)
    for members in groups.values():
        members.sort(key=lambda r: (r["seed"] is None, r["seed"]))
    families = sorted({f for f, _ in groups})
    arms = sorted({a for _, a in groups}, key=lambda a: (list(ARMS.values()).index(a) if a in ARMS.values() else 2, a))
    cells = {}
    for (family, arm), members in groups.items():
        sft = groups.get((family, "sft"), [])
        for task in SPLITS:
            for metric in METRICS:
                c = cell(members, sft, task, metric)
                if c is not None:
                    cells[f"{family}|{arm}|{task}|{metric}"] = c
    lrs = {f"{f}|{a}": sorted({r["lr"] for r in m}) for (f, a), m in groups.items()}
    return {"root": str(root), "teacher": teacher(root), "families": families, "arms": arms, "lrs": lrs, "cells": cells,
            "verdicts": {f: verdict(cells, f, arms) for f in families}}


def verdict(cells: dict, family: str, arms: list[str]) -> str:
    """One sentence: does DPO (any beta of the grid, Bonferroni over it) beat SFT on exact_match of the test split."""
    dpo = [a for a in arms if a.startswith("dpo b=")]
    found = [(a, cells.get(f"{family}|{a}|slm_toolcall|exact_match", {}).get("vs_sft")) for a in dpo]
    found = [(a, v) for a, v in found if v]
    if not found:
        return f"{family}: no DPO arm with scores beside SFT: no answer."
    level = ALPHA / len(found)
    better = [(a, v) for a, v in found if v["p"] < level and v["diff"] > 0]
    worse = [(a, v) for a, v in found if v["p"] < level and v["diff"] < 0]
    def said(a, v):
        return f"{a}: {v['diff']:+.3f} [{v['low']:+.3f}, {v['high']:+.3f}], p = {v['p']:.3g}"
    if better:
        head = "DPO beats SFT at this scale"
    elif worse:
        head = "SFT beats DPO at this scale"
    else:
        head = "DPO does not detectably beat SFT at this scale"
    detail = "; ".join(said(a, v) for a, v in found)
    return (f"{family}: {head} (exact match on the test split, pooled over seeds; level {level:.3g}, Bonferroni over "
            f"{len(found)} beta(s): {detail}).")


def _fmt(c: dict | None) -> tuple[str, str]:
    if not c:
        return "-", "-"
    score = f"{c['mean']:.3f} [{c['low']:.3f}, {c['high']:.3f}]"
    v = c.get("vs_sft")
    if not v:
        return score, "-"
    wins = sum(s["p"] < ALPHA and s["n01"] > s["n10"] for s in v["seeds"])
    losses = sum(s["p"] < ALPHA and s["n01"] < s["n10"] for s in v["seeds"])
    return score, (f"{v['diff']:+.3f} [{v['low']:+.3f}, {v['high']:+.3f}] p={v['p']:.2g}; "
                   f"McNemar +{wins}/-{losses} of {len(v['seeds'])}")


def markdown(result: dict) -> str:
    """The answer as markdown: per split a table of family x arm (both metrics, against SFT), the verdicts, and the
    published figures with their scales."""
    lines = [f"# DPO against SFT on the function-calling task ({result['root']})", "",
             "Each cell: the mean over seeds and items [95% interval, seeds and items resampled]; vs SFT: the paired "
             "difference pooled over seeds [95% interval over items] and its p, and per seed McNemar's exact test "
             "(+wins/-losses at p < 0.05 of the seeds compared). tokens: the stage's own training tokens (its "
             "sequences' tokens; a preference step counts both sides of each pair), the mean over seeds.", ""]
    t = result.get("teacher") or {}
    if t:
        lines += [f"The teacher ({t.get('params')} parameters): exact_match {t.get('exact_match')}; its pairs: "
                  f"{t.get('pairs')}.", ""]
    for task in SPLITS:
        lines += [f"## {task}", "", "| family | arm | runs | tokens | exact_match | vs sft | format_valid | vs sft |",
                  "|---|---|---|---|---|---|---|---|"]
        for family in result["families"]:
            for arm in result["arms"]:
                em = result["cells"].get(f"{family}|{arm}|{task}|exact_match")
                fv = result["cells"].get(f"{family}|{arm}|{task}|format_valid")
                if em or fv:
                    c = em or fv
                    tokens = f"{c['tokens']:.3g}" if c.get("tokens") else "-"
                    lines.append(f"| {family} | {arm} | {c['runs']} | {tokens} | {' | '.join(_fmt(em))} | "
                                 f"{' | '.join(_fmt(fv))} |")
        lines.append("")
    lines += ["## Does DPO beat SFT?", ""] + [f"- {v}" for v in result["verdicts"].values()] + [""]
    lines += ["## Published figures", "", "| source | finding | scale |", "|---|---|---|"]
    lines += [f"| {s} | {f} | {scale} |" for s, f, scale in PUBLISHED] + [""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.dpo", description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the study's runs ($SLM_RUNS of make dpo: $(DPO_DIR)/runs)")
    parser.add_argument("-o", "--out", type=Path, help="write the markdown here (and <out>.json) too")
    args = parser.parse_args(argv)
    if not any((args.root / group).is_dir() for group in ARMS):
        print(f"analysis.dpo: {args.root}: none of the study's run groups ({', '.join(ARMS)}) is here",
              file=sys.stderr)
        return 2
    result = study(args.root)
    text = markdown(result)
    print(text, end="")
    if args.out:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
