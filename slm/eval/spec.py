"""What to evaluate: EvalSpec, and how an `eval` config node (conf/eval/*.yaml, a suite) becomes one.

    spec = spec_from_config(cfg["eval"])     # tasks, metrics, average (a suite's list, averaged under its name), ...
    check_spec(spec, "eval.")                # slm.eval.checks: every field checked before anything runs

slm-eval builds one from its flags (suites expanded into their tasks, metrics and average); slm.eval.run evaluates
one, and slm.eval.summary reads its tasks, metrics and average into the record's eval.lm_eval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from slm.eval.checks import EvalError


@dataclass
class EvalSpec:
    """What to evaluate: the fields of an `eval` config node (conf/eval/*.yaml)."""

    tasks: list[str] = field(default_factory=list)
    """lm-eval task or group names (the offline tasks ship in slm/eval/tasks)."""
    metrics: dict[str, str] = field(default_factory=dict)
    """Headline metric per task, as lm-eval names it ("acc_norm,none"); others: the task's first metric."""
    average: dict[str, list[str]] = field(default_factory=dict)
    """Suite name -> tasks whose headline scores are averaged into eval.lm_eval.averages[suite]."""
    num_fewshot: int | None = None
    """None: each task's default (lm-eval's own YAMLs)."""
    batch_size: int = 16
    limit: float | None = None
    """Documents per task (a fraction if < 1); None: all. For smoke tests only."""
    device: str | None = None
    dtype: str = "auto"
    include_path: list[str] = field(default_factory=list)
    """More task directories, searched after slm/eval/tasks."""
    throughput: bool = True
    """Also measure batch-1 decode speed (eval.throughput)."""
    throughput_prompt_tokens: int = 128
    throughput_new_tokens: int = 128
    throughput_compile: bool = False
    """torch.compile the decode step (CPU: ~4x faster for small models, after 20-60 s of compiling)."""
    throughput_diffusion: dict = field(default_factory=dict)
    """Sampler settings for a diffusion model's decode measurement: block_length (32), steps (None:
    new_tokens / 4), threshold (None: low-confidence remasking); see slm.eval.throughput."""
    throughput_cpu_threads: int | None = 1
    """CPU threads for the decode measurement: a small model's batch-1 step is a chain of tiny ops that more
    threads make noisier, not faster; None: the process's setting."""
    gen_kwargs: dict | None = None
    seed: int = 1234
    per_document: bool = True
    """Also write each document's scores to <results stem>_documents.jsonl (compact: scores and document
    hashes, no texts) for paired comparisons between runs (slm-compare)."""
    log_samples: bool = False
    """Also write lm-eval's whole samples (contexts, responses) to <results stem>_samples.jsonl (large)."""
    model_args: dict = field(default_factory=dict)
    """Extra arguments of the `slm` lm-eval model (e.g. tokenizer, max_length, prefix_sharing)."""


def spec_from_config(node: dict, name: str | None = None) -> EvalSpec:
    """EvalSpec from an `eval` config node: tasks, metrics, average (a list: averaged under the node's
    name), num_fewshot, batch_size, limit, device, dtype, throughput ({enabled, prompt_tokens,
    new_tokens} or a bool), include_path."""
    node = dict(node or {})
    name = node.pop("name", None) or name or "eval"
    node.pop("enabled", None)
    known = set(EvalSpec.__dataclass_fields__)
    throughput = node.pop("throughput", True)
    if isinstance(throughput, dict):
        throughput = dict(throughput)
        for key in ("prompt_tokens", "new_tokens", "compile", "cpu_threads", "diffusion"):
            if key in throughput:
                node[f"throughput_{key}"] = throughput.pop(key)
        if node.get("throughput_diffusion") is None:
            node.pop("throughput_diffusion", None)
        enabled = throughput.pop("enabled", True)
        if throughput:
            raise EvalError(f"eval.throughput has unknown key {sorted(throughput)[0]!r}: choose from enabled, "
                            "prompt_tokens, new_tokens, compile, cpu_threads, diffusion")
        throughput = enabled
    average = node.pop("average", None)
    if isinstance(average, list):
        average = {name: average} if average else {}
    unknown = sorted(set(node) - known)
    if unknown:
        raise EvalError(f"eval config: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for key in ("include_path", "tasks"):  # a string: comma-separated (eval.tasks=a,b on a command line is a sweep)
        value = node.get(key) or []
        node[key] = [p.strip() for p in value.split(",") if p.strip()] if isinstance(value, str) else value
    node["metrics"] = node.get("metrics") or {}
    limit = node.get("limit")
    if isinstance(limit, (int, float)) and not isinstance(limit, bool) and math.isfinite(limit) and limit >= 1:
        node["limit"] = int(limit)
    return EvalSpec(**node, throughput=throughput, average=average or {})
