"""What to evaluate: EvalSpec, the `eval` settings (conf/eval/*.yaml, a suite) on the settings protocol
(slm.settings): limits declared with each field, cross-field rules as `require(...)`, every bad value one
SettingsError naming its full key (`eval.throughput.diffusion.cache='x' is invalid: one of: none, prefix, dual`).

    spec = spec_from_config(cfg["eval"])     # settled: tasks, metrics, average (a suite's list, averaged under its name)
    check_available(spec)                    # slm.eval.checks: what must exist here (task directories, a CUDA device)

slm-eval builds one from its flags (suites expand into their tasks, metrics and average); slm.eval.run evaluates
one, and slm.eval.summary reads its tasks, metrics and average into the record's eval.lm_eval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from slm.sampler_settings import SamplerSettings
from slm.settings import Settings, require, setting

DTYPES = ("auto", "float32", "bfloat16", "float16")
"""eval.dtype's choices (auto: bfloat16 on CUDA when supported, else float32)."""

OWN_ARGS = ("pretrained", "batch_size", "device", "dtype")
"""The `slm` model's arguments that evaluation sets itself (the run, and eval.batch_size / device / dtype)."""


@dataclass
class ThroughputSettings(Settings):
    """eval.throughput: the batch-1 decode measurement (`throughput: false` in a node: off)."""

    enabled: bool = True
    """Measure batch-1 decode speed (eval.throughput in the record)."""
    prompt_tokens: int = setting(128, gt=0)
    """Prompt tokens before decoding, capped to half the model's context."""
    new_tokens: int = setting(128, gt=0)
    """Tokens decoded."""
    compile: bool = False
    """torch.compile the decode step (CPU: ~4x faster for small models, after 20-60 s of compiling)."""
    cpu_threads: int | None = setting(1, gt=0, null="as the process runs")
    """CPU threads for the measurement: a small model's batch-1 step is a chain of tiny ops that more threads make
    noisier, not faster; null: the process's setting."""
    diffusion: SamplerSettings = field(default_factory=SamplerSettings)
    """A masked diffusion model's sampler while measuring (autoregressive models: unused)."""

    @classmethod
    def from_node(cls, node, key: str):
        """The group from its mapping, or from a bare true/false (`throughput: false`: enabled or not)."""
        return cls(enabled=node) if isinstance(node, bool) else super().from_node(node, key)


@dataclass
class EvalSpec(Settings):
    """What to evaluate: the fields of an `eval` config node (conf/eval/*.yaml). Settled when made."""

    name: str = "eval"
    """The suite's name: a list given as `average` is averaged under it."""
    enabled: bool = True
    """Evaluate after training (false: eval=none)."""
    tasks: list[str] = field(default_factory=list)
    """lm-eval task or group names (the offline tasks ship in slm/eval/tasks); a string: comma-separated."""
    metrics: dict[str, str] = field(default_factory=dict)
    """Headline metric per task, as lm-eval names it ("acc_norm,none"); others: the task's first metric."""
    average: dict[str, list[str]] | list[str] = field(default_factory=dict)
    """Suite name -> tasks whose headline scores are averaged into eval.lm_eval.averages[suite]; a list: averaged
    under `name`."""
    num_fewshot: int | None = setting(None, ge=0, null="each task's default")
    """Few-shot examples per document; null: each task's default (lm-eval's own YAMLs)."""
    batch_size: int = setting(16, gt=0)
    """Documents per forward."""
    limit: float | None = setting(None, gt=0, null="all")
    """Documents per task (a fraction if < 1); null: all. For smoke tests only."""
    device: str | None = None
    """cpu, cuda or cuda:<index>; null: cuda if available, else cpu."""
    dtype: str = setting("auto", choices=DTYPES)
    """auto: bfloat16 on CUDA, float32 on CPU."""
    include_path: list[str] = field(default_factory=list)
    """More task directories, searched after slm/eval/tasks."""
    throughput: ThroughputSettings = field(default_factory=ThroughputSettings)
    """The batch-1 decode measurement (eval.throughput.*)."""
    gen_kwargs: dict | str | None = None
    """Generation arguments of generate_until tasks (a mapping, or lm-eval's `k=v,k=v` string); null: the tasks'."""
    seed: int = 1234
    """Python, numpy, torch and few-shot seed."""
    per_document: bool = True
    """Also write each document's scores to <results stem>_documents.jsonl (compact: scores and document
    hashes, no texts) for paired comparisons between runs (slm-compare)."""
    log_samples: bool = False
    """Also write lm-eval's whole samples (contexts, responses) to <results stem>_samples.jsonl (large)."""
    model_args: dict = field(default_factory=dict)
    """Extra arguments of the `slm` lm-eval model (e.g. tokenizer, max_length, prefix_sharing)."""

    def __post_init__(self) -> None:
        self.settle("eval")

    def derive(self, root) -> None:
        """A list as `average` becomes {name: list}."""
        if isinstance(self.average, list):
            self.average = {self.name: self.average} if self.average else {}

    def check(self, key: str, root) -> None:
        tasks, metrics, args, device = self.tasks, self.metrics, self.model_args, self.device
        require((all(t.strip() for t in tasks), f"{key}.tasks", tasks, "lm-eval task or group names (none empty)"),
                (isinstance(metrics, dict), f"{key}.metrics", metrics, "a mapping {task: 'metric,filter'}"),
                (isinstance(self.gen_kwargs, (dict, str, type(None))), f"{key}.gen_kwargs", self.gen_kwargs,
                 "a mapping of generation arguments (or null)"),
                (isinstance(args, dict), f"{key}.model_args", args, "a mapping of the slm model's arguments"))
        for task, metric in metrics.items():
            require((isinstance(metric, str) and "," in metric, f"{key}.metrics.{task}", metric,
                     "the headline metric as lm-eval names it, 'metric,filter' (e.g. 'acc_norm,none')"))
        require((isinstance(self.average, dict), f"{key}.average", self.average,
                 "a list of task names, or a mapping {suite: [tasks]}"))
        for suite, members in self.average.items():
            require((isinstance(members, list), f"{key}.average", members, "a list of task names"))
            missing = [t for t in members if t not in tasks]
            require((not missing, f"{key}.average", members, f"every task averaged must be scored "
                     f"({', '.join(map(str, missing))} {'is' if len(missing) == 1 else 'are'} not in {key}.tasks {tasks})"))
        require(*[(False, f"{key}.model_args.{arg}", args[arg], f"evaluation sets {arg} itself"
                   + ("" if arg == "pretrained" else f"; use {key}.{arg}")) for arg in args if arg in OWN_ARGS])
        kind, _, index = (device or "").partition(":")
        require((device is None or (kind in ("cpu", "cuda", "mps") and (not index or index.isdigit())),
                 f"{key}.device", device, "cpu, cuda or cuda:<index> (or null: cuda if available, else cpu)"))


def spec_from_config(node: dict | None, name: str | None = None) -> EvalSpec:
    """The settled EvalSpec of an `eval` config node (a suite named `name` unless the node names itself); an
    unknown key or a bad value is one SettingsError line naming it."""
    node = dict(node or {})
    node["name"] = node.get("name") or name or "eval"
    node["limit"] = whole_limit(node.get("limit"))
    return EvalSpec.from_node(node, "eval")


def whole_limit(limit):
    """A limit of 1 or more as a whole number of documents (as lm-eval reads it); any other value as it is."""
    number = isinstance(limit, (int, float)) and not isinstance(limit, bool) and math.isfinite(limit)
    return int(limit) if number and limit >= 1 else limit
