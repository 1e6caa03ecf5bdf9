"""What an evaluation setting may be, checked before any work: before training (slm-train's preflight) or before
a model loads (slm-eval).

    check_spec(spec, "eval.")          # every field of an EvalSpec (from conf/eval/*.yaml or slm-eval's flags)
    check_for_model(spec, model_cfg, "eval.")   # what depends on the model: its kind, the diffusion sampler

Each refusal is an EvalError, one line naming the setting as the user spelt it (`eval.throughput.diffusion.cache`
in a run's config, `throughput.diffusion.cache` for slm-eval), its value and what is allowed.
"""

from __future__ import annotations

import math
from pathlib import Path


class EvalError(ValueError):
    """Bad evaluation input (path, task, option); the message is one line."""


DTYPES = ("auto", "float32", "bfloat16", "float16")
"""eval.dtype's choices (auto: bfloat16 on CUDA when supported, else float32)."""

SPEC_NAMES = {"throughput": "throughput.enabled", "throughput_prompt_tokens": "throughput.prompt_tokens",
              "throughput_new_tokens": "throughput.new_tokens", "throughput_compile": "throughput.compile",
              "throughput_cpu_threads": "throughput.cpu_threads", "throughput_diffusion": "throughput.diffusion"}
"""EvalSpec's flat fields by their names in an `eval` config node."""


def _integer(value, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _bad(prefix: str, field: str, value, rule: str) -> EvalError:
    return EvalError(f"{prefix}{SPEC_NAMES.get(field, field)}={value!r} is invalid: {rule}")


def check_spec(spec, prefix: str = "") -> None:
    """Refuse an EvalSpec field no evaluation can honour, before a model loads or a file is written (EvalError,
    one line naming `prefix` + the field): types and ranges of every field, metric keys in lm-eval's
    'metric,filter' form, averages over tasks that are scored, task directories that exist, a CUDA device where
    none is visible, the diffusion sampler's settings."""
    tasks = spec.tasks
    if not isinstance(tasks, list) or not all(isinstance(t, str) and t.strip() for t in tasks):
        raise _bad(prefix, "tasks", tasks, "expected a list of lm-eval task or group names")
    if not isinstance(spec.metrics, dict):
        raise _bad(prefix, "metrics", spec.metrics, "expected a mapping {task: 'metric,filter'}")
    for task, metric in spec.metrics.items():
        if not isinstance(metric, str) or "," not in metric:
            raise _bad(prefix, f"metrics.{task}", metric, "expected the headline metric as lm-eval names it, "
                       "'metric,filter' (e.g. 'acc_norm,none')")
    for suite, members in spec.average.items():
        missing = [t for t in members or [] if t not in tasks]
        if not isinstance(members, list) or missing:
            raise _bad(prefix, "average", members, f"every task averaged must be scored ({', '.join(missing)} "
                       f"{'is' if len(missing) == 1 else 'are'} not in {prefix}tasks {tasks})"
                       if missing else "expected a list of task names")
    few = spec.num_fewshot
    if few is not None and not _integer(few, 0):
        raise _bad(prefix, "num_fewshot", few, "expected an integer >= 0 (or null: each task's default)")
    limit = spec.limit
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float))
                              or not math.isfinite(limit) or limit <= 0):
        raise _bad(prefix, "limit", limit, "expected a finite number > 0 (documents per task, a fraction if < 1; "
                   "null: all)")
    for field, least in (("batch_size", 1), ("throughput_prompt_tokens", 1), ("throughput_new_tokens", 1),
                         ("seed", -2**63)):
        if not _integer(getattr(spec, field), least):
            raise _bad(prefix, field, getattr(spec, field), "expected an integer" + (" >= 1" if least == 1 else ""))
    threads = spec.throughput_cpu_threads
    if threads is not None and not _integer(threads, 1):
        raise _bad(prefix, "throughput_cpu_threads", threads, "expected an integer >= 1 (or null: as the process "
                   "runs)")
    for field in ("throughput", "throughput_compile", "per_document", "log_samples"):
        if not isinstance(getattr(spec, field), bool):
            raise _bad(prefix, field, getattr(spec, field), "expected true or false")
    if spec.dtype not in DTYPES:
        raise _bad(prefix, "dtype", spec.dtype, f"choose one of: {', '.join(DTYPES)}")
    for path in spec.include_path:
        if not Path(str(path)).expanduser().is_dir():
            raise _bad(prefix, "include_path", path, "no such directory (a directory of lm-eval task YAMLs)")
    if spec.gen_kwargs is not None and not isinstance(spec.gen_kwargs, (dict, str)):
        raise _bad(prefix, "gen_kwargs", spec.gen_kwargs, "expected a mapping of generation arguments (or null)")
    _check_model_args(spec.model_args, prefix)
    _check_diffusion(spec.throughput_diffusion, prefix)
    _check_device(spec.device, prefix)


def _check_diffusion(settings, prefix: str, model_cfg=None) -> None:
    """The decode measurement's diffusion sampler settings: known keys, and values its sampler takes."""
    from slm.sampler_settings import SAMPLER_DEFAULTS as DIFFUSION_DEFAULTS, check_sampler

    where = f"{prefix}throughput.diffusion"
    if not isinstance(settings, dict):
        raise EvalError(f"{where}={settings!r} is invalid: a mapping of {', '.join(DIFFUSION_DEFAULTS)}")
    unknown = sorted(set(settings) - set(DIFFUSION_DEFAULTS))
    if unknown:
        from slm.typecheck import did_you_mean

        raise EvalError(f"{where} has unknown key {unknown[0]!r}{did_you_mean(str(unknown[0]), DIFFUSION_DEFAULTS)}: "
                        f"choose from {', '.join(DIFFUSION_DEFAULTS)}")
    merged = {**DIFFUSION_DEFAULTS, **settings}
    try:
        check_sampler(merged["block_length"], merged["steps"], merged["threshold"], merged["cache"], model_cfg)
    except ValueError as err:
        raise EvalError(f"{where}.{err}") from None


OWN_ARGS = ("pretrained", "batch_size", "device", "dtype")
"""The `slm` model's arguments that evaluation sets itself (the run, and eval.batch_size / device / dtype)."""


def _check_model_args(args, prefix: str, model_cfg=None) -> None:
    """model_args: a mapping of the `slm` lm-eval model's argument names (a typo would be ignored with a warning
    in lm_eval.log, after training), none that evaluation sets itself, diffusion values its estimator takes and,
    with the model's config, a max_length that fits its context."""
    where = f"{prefix}model_args"
    if not isinstance(args, dict):
        raise EvalError(f"{where}={args!r} is invalid: expected a mapping of the slm model's arguments")
    if not args:
        return
    own = [k for k in args if k in OWN_ARGS]
    if own:
        raise EvalError(f"{where}.{own[0]}={args[own[0]]!r} is invalid: evaluation sets {own[0]} itself"
                        + ("" if own[0] == "pretrained" else f"; use {prefix}{own[0]}"))
    from slm.eval.lm import model_arg_names  # lm-eval: loaded now rather than after training
    from slm.eval.lm_diffusion import MODEL_ARGS, DiffusionSettings
    from slm.typecheck import did_you_mean

    known = sorted(model_arg_names() - set(OWN_ARGS))
    unknown = sorted(set(map(str, args)) - set(known))
    if unknown:
        raise EvalError(f"{where} has unknown key {unknown[0]!r}{did_you_mean(unknown[0], known)}: the slm model "
                        f"takes {', '.join(known)}")
    try:
        DiffusionSettings.from_model_args({k: v for k, v in args.items() if k in MODEL_ARGS})
    except ValueError as err:
        raise EvalError(f"{where}.{err}") from None
    length = args.get("max_length")
    if length is not None:
        context = model_cfg.context_length if model_cfg is not None else None
        if not _integer(length, 2) or (context is not None and length > context):
            raise EvalError(f"{where}.max_length={length!r} is invalid: expected an integer from 2 to the model's "
                            f"context length{f' ({context})' if context else ''}")


def _check_device(device, prefix: str) -> None:
    if device is None:
        return
    text = str(device)
    kind, _, index = text.partition(":")
    if not isinstance(device, str) or kind not in ("cpu", "cuda", "mps") or (index and not index.isdigit()):
        raise _bad(prefix, "device", device, "expected cpu, cuda or cuda:<index> (or null: cuda if available, "
                   "else cpu)")
    if kind != "cuda":
        return
    import torch  # only here: a check with the default device loads nothing heavy

    if not torch.cuda.is_available():
        raise _bad(prefix, "device", device, "no CUDA device is visible here; use cpu (or null: cuda when "
                   "available, else cpu)")
    if index and int(index) >= torch.cuda.device_count():
        raise _bad(prefix, "device", device, f"there are {torch.cuda.device_count()} CUDA device(s) (cuda:0 to "
                   f"cuda:{torch.cuda.device_count() - 1})")


def check_for_model(spec, model_cfg, prefix: str = "") -> None:
    """Refuse what this model cannot be evaluated with (EvalError, one line): tasks or a decode measurement for a
    network that predicts only the token after a whole window; a diffusion sampler setting this model cannot use
    (a Fast-dLLM cache for a block-causal model, or for one with mixers other than attention)."""
    from slm.model.diffusion import is_diffusion
    from slm.model.networks import NETWORKS

    if not (spec.tasks or spec.throughput):
        return
    if not NETWORKS.get(model_cfg.kind).every_position:
        raise EvalError(f"model.kind={model_cfg.kind!r} predicts only the token after one whole window: lm-eval and "
                        "decoding need a model that scores every position (its validation NLL is in the record; "
                        "eval=none skips this step)")
    if spec.throughput and is_diffusion(model_cfg):
        _check_diffusion(spec.throughput_diffusion, prefix, model_cfg)
    if spec.tasks:
        _check_model_args(spec.model_args, prefix, model_cfg)
