"""What an evaluation needs beyond its settings (slm.eval.spec.EvalSpec, settled when made), checked before any work:
before training (slm-train's preflight) or before a model loads (slm-eval).

    check_available(spec)              # what must exist here: task directories, a CUDA device, the model's arguments
    check_for_model(spec, model_cfg)   # what depends on the model: its kind, the diffusion sampler's cache

Each refusal is an EvalError, one line naming the setting (`eval.include_path`, `eval.throughput.diffusion.cache`),
its value and what is allowed.
"""

from __future__ import annotations

from pathlib import Path

KEY = "eval"
"""The settings' key in a run's config (slm-eval's suites and flags are named the same)."""


class EvalError(ValueError):
    """Bad evaluation input (path, task, option); the message is one line."""


def check_available(spec) -> None:
    """Refuse what a settled EvalSpec names that is not here, before a model loads or a file is written (EvalError,
    one line): task directories that do not exist, a CUDA device where none is visible, model_args the `slm` lm-eval
    model does not take."""
    for path in spec.include_path:
        if not Path(str(path)).expanduser().is_dir():
            raise EvalError(f"{KEY}.include_path={path!r} is invalid: no such directory (a directory of lm-eval task "
                            "YAMLs)")
    _check_model_args(spec.model_args)
    _check_device(spec.device)


def _check_model_args(args, model_cfg=None) -> None:
    """model_args: the `slm` lm-eval model's argument names (a typo would be ignored with a warning in
    lm_eval.log, after training), diffusion values its estimator takes (SettingsError) and, with the model's config,
    a max_length that fits its context."""
    where = f"{KEY}.model_args"
    if not args:
        return
    from slm.eval.lm import model_arg_names  # lm-eval: loaded now rather than after training
    from slm.eval.lm_diffusion import MODEL_ARGS, DiffusionSettings
    from slm.eval.spec import OWN_ARGS
    from slm.typecheck import did_you_mean

    known = sorted(model_arg_names() - set(OWN_ARGS))
    unknown = sorted(set(map(str, args)) - set(known))
    if unknown:
        raise EvalError(f"{where} has unknown key {unknown[0]!r}{did_you_mean(unknown[0], known)}: the slm model "
                        f"takes {', '.join(known)}")
    DiffusionSettings.from_model_args({k: v for k, v in args.items() if k in MODEL_ARGS}, where)
    length = args.get("max_length")
    if length is not None:
        context = model_cfg.context_length if model_cfg is not None else None
        whole = isinstance(length, int) and not isinstance(length, bool)
        if not whole or length < 2 or (context is not None and length > context):
            raise EvalError(f"{where}.max_length={length!r} is invalid: expected an integer from 2 to the model's "
                            f"context length{f' ({context})' if context else ''}")


def _check_device(device) -> None:
    """A CUDA device (the form is the settings'): one that this machine has."""
    if device is None or not device.startswith("cuda"):
        return
    import torch  # only here: a check with the default device loads nothing heavy

    index = device.partition(":")[2]
    if not torch.cuda.is_available():
        raise EvalError(f"{KEY}.device={device!r} is invalid: no CUDA device is visible here; use cpu (or null: cuda "
                        "when available, else cpu)")
    if index and int(index) >= torch.cuda.device_count():
        raise EvalError(f"{KEY}.device={device!r} is invalid: there are {torch.cuda.device_count()} CUDA device(s) "
                        f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})")


def check_for_model(spec, model_cfg) -> None:
    """Refuse what this model cannot be evaluated with (EvalError, one line): tasks or a decode measurement for a
    network that predicts only the token after a whole window; a diffusion sampler setting this model cannot use
    (a Fast-dLLM cache for a block-causal model, or for one with mixers other than attention)."""
    from slm.model.diffusion import cache_refusal, is_diffusion
    from slm.model.networks import NETWORKS

    if not (spec.tasks or spec.throughput.enabled):
        return
    if not NETWORKS.get(model_cfg.kind).every_position:
        raise EvalError(f"model.kind={model_cfg.kind!r} predicts only the token after one whole window: lm-eval and "
                        "decoding need a model that scores every position (its validation NLL is in the record; "
                        "eval=none skips this step)")
    refusal = cache_refusal(model_cfg, spec.throughput.diffusion.cache) if is_diffusion(model_cfg) else None
    if spec.throughput.enabled and refusal:
        raise EvalError(f"{KEY}.throughput.diffusion.{refusal}")
    if spec.tasks:
        _check_model_args(spec.model_args, model_cfg)
