"""Old spellings of config fields and how they read today: stored records, config files and command lines.

Settings that belong to a part live in that part's nested group (`model.moe.*`, `model.memory.*`,
`model.canon.*`, `train.schedule.*`, `train.length.*`, `train.optim.adamw.*`, `train.validation.*`,
`train.logging.*`, `train.checkpoint.*`, `train.parallel.*`, ...); they were once flat fields of ModelConfig and
TrainConfig. This module maps each flat name to its group and field, so that

- a stored `config.json` / `result.json` / checkpoint config with flat fields loads (`upgrade_model_fields`,
  `upgrade_train_fields`);
- an old command line (`model.n_experts=8`) composes, with one line naming the new spelling (`upgrade_override`);
- a job finds its run directory: keys are spelt as today, and `key_spelling` gives the former key of a moved
  field under each former rule (`model.moe.n_experts` -> `model.n_experts`; FORMER_KEY_RULES), under which runs
  made before were named
  (slm.cli.job_keys.key_from_overrides looks for those).

Standard library only (the analysis reads records through it without importing torch).
"""

from __future__ import annotations

import copy

MODEL_MOVED: dict[str, tuple[str, str]] = {
    "n_experts": ("moe", "n_experts"),
    "top_k": ("moe", "top_k"),
    "expert_d_ff": ("moe", "expert_d_ff"),
    "shared_expert_d_ff": ("moe", "shared_expert_d_ff"),
    "norm_topk_prob": ("moe", "norm_topk_prob"),
    "moe_aux_coef": ("moe", "aux_coef"),
    "moe_aux_scope": ("moe", "aux_scope"),
    "moe_z_coef": ("moe", "z_coef"),
    "memory_layers": ("memory", "layers"),
    "memory_segment": ("memory", "segment"),
    "memory_chunk": ("memory", "chunk"),
    "memory_depth": ("memory", "depth"),
    "memory_hidden": ("memory", "hidden"),
    "memory_heads": ("memory", "heads"),
    "persistent_tokens": ("memory", "persistent_tokens"),
    "memory_lr": ("memory", "lr"),
    "canon": ("canon", "kind"),  # a string: the flat field; a mapping: the group itself
    "canon_set": ("canon", "set"),
    "canon_b_after_qk_norm": ("canon", "b_after_qk_norm"),
    "canon_kernel": ("canon", "kernel"),
    # issue 40: the top level keeps the network's kind and shape; the rest moved into the group that reads it
    "n_heads": ("attention", "n_heads"),
    "n_kv_heads": ("attention", "n_kv_heads"),
    "head_dim": ("attention", "head_dim"),
    "causal": ("attention", "causal"),
    "attention_block": ("attention", "block"),
    "sliding_window": ("attention", "sliding_window"),
    "attn_scale": ("attention", "scale"),
    "attn_logit_softcap": ("attention", "logit_softcap"),
    "qk_norm": ("attention", "qk_norm"),
    "qk_norm_scope": ("attention", "qk_norm_scope"),
    "position": ("position", "kind"),
    "rope_theta": ("position", "rope_theta"),
    "rope_theta_local": ("position", "rope_theta_local"),
    "rotary_fraction": ("position", "rotary_fraction"),
    "mlp": ("mlp", "kind"),
    "d_ff": ("mlp", "d_ff"),
    "d_ff_multiple": ("mlp", "d_ff_multiple"),
    "mlp_ratio": ("mlp", "ratio"),
    "gelu_approximate": ("mlp", "gelu_approximate"),
    "window_hidden": ("mlp", "window_hidden"),
    "conv_kernel": ("conv", "kernel"),
    "norm": ("norm", "kind"),
    "norm_eps": ("norm", "eps"),
    "norm_placement": ("norm", "placement"),
    "final_norm": ("norm", "final"),
    "tie_embeddings": ("embedding", "tie"),
    "scale_embeddings": ("embedding", "scale"),
    "embedding_padding_idx": ("embedding", "padding_idx"),
    "mask_token_id": ("embedding", "mask_token_id"),
    "document_end_id": ("embedding", "document_end_id"),
    "head_bias": ("embedding", "head_bias"),
    "final_logit_softcap": ("embedding", "logit_softcap"),
    "bias": ("block", "bias"),
    "dropout": ("block", "dropout"),
    "dropout_at": ("block", "dropout_at"),
    "layer_repeat": ("block", "repeat"),
    "loop_layers": ("block", "loop_layers"),
    "loop_steps": ("block", "loop_steps"),
    "parametrization": ("parametrization", "kind"),
    "init": ("parametrization", "init"),
    "init_std": ("parametrization", "init_std"),
    "mup.base_width": ("parametrization", "base_width"),  # a field of a group that moved: model.mup.<field>
    "mup.base_depth": ("parametrization", "base_depth"),
    "mup.depth_alpha": ("parametrization", "depth_alpha"),
    "mup.base_head_dim": ("parametrization", "base_head_dim"),
    "mup.decay": ("parametrization", "decay"),
}
"""ModelConfig's former field (flat, or `group.field` of a former group) -> (group, field) it moved to."""

COLUMN_GROUPS = ("attention", "position", "mlp", "conv", "norm", "embedding", "block", "parametrization")
"""Groups made from ModelConfig's flat fields (issue 40): the results table keeps each of their fields under its
former name (`model_column`), so tables, notebooks and the report read the columns they always had."""

TRAIN_MOVED: dict[str, tuple[str, str]] = {
    "tokens": ("length", "tokens"),
    "steps": ("length", "steps"),
    "epochs": ("length", "epochs"),
    "windows_per_epoch": ("length", "windows_per_epoch"),
    "schedule": ("schedule", "kind"),  # a string: the flat field; a mapping: the group itself
    "warmup_fraction": ("schedule", "warmup_fraction"),
    "warmup_steps": ("schedule", "warmup_steps"),
    "decay_fraction": ("schedule", "decay_fraction"),
    "min_lr_ratio": ("schedule", "min_lr_ratio"),
    "betas": ("optim", "adamw.betas"),
    "eps": ("optim", "adamw.eps"),
    "weight_decay": ("optim", "adamw.weight_decay"),
    "decay_embeddings": ("optim", "adamw.decay_embeddings"),
    "val_interval": ("validation", "interval"),
    "val_batches": ("validation", "batches"),
    "eval_windows": ("validation", "windows"),
    "restore_best": ("validation", "restore_best"),
    "log_interval": ("logging", "interval"),
    "loggers": ("logging", "loggers"),
    "progress_bar": ("logging", "progress_bar"),
    "print_interval": ("logging", "print_interval"),
    "peak_flops": ("logging", "peak_flops"),
    "detect_anomaly": ("logging", "detect_anomaly"),
    "ckpt_interval": ("checkpoint", "interval"),
    "keep_every": ("checkpoint", "keep_every"),
    "keep_steps": ("checkpoint", "keep_steps"),
    "accelerator": ("parallel", "accelerator"),
    "devices": ("parallel", "devices"),
    "num_nodes": ("parallel", "num_nodes"),
    "strategy": ("parallel", "strategy"),
    "micro_batch_size": ("parallel", "micro_batch_size"),
}
"""TrainConfig's flat field -> (group, field) it moved to."""

SECTIONS = {"model": MODEL_MOVED, "train": TRAIN_MOVED}

_LEGACY_LETTERS = {"L": "local_attn", "G": "attn"}


class RenameError(ValueError):
    """Stored fields that cannot be read (both spellings of one setting, a legacy value never written)."""


def _take(out: dict, old: str):
    """Remove the former field `old` (flat, or `group.field` inside a former group, which goes when emptied) from
    `out` and return its value; MISSING where absent."""
    head, dot, leaf = old.partition(".")
    if not dot:
        return out.pop(old) if old in out else _MISSING
    group = out.get(head)
    if not isinstance(group, dict) or leaf not in group:
        return _MISSING
    group = out[head] = dict(group)
    value = group.pop(leaf)
    if not group:
        del out[head]
    return value


_MISSING = object()


def _move(fields_: dict, moved: dict[str, tuple[str, str]], section: str) -> dict:
    out = copy.deepcopy(dict(fields_))
    for old, (group, name) in moved.items():
        if old == group and old in out and not isinstance(out[old], (str, int, float, bool)):
            continue  # the group itself (model.canon: {...}), not the flat field of the same name
        at = list(out).index(old.partition(".")[0]) if old.partition(".")[0] in out else len(out)
        value = _take(out, old)
        if value is _MISSING:
            continue
        if group not in out:  # a group made here sits where the field that made it was
            out = dict([*list(out.items())[:at], (group, {}), *list(out.items())[at:]])
        *parents, leaf = [group, *name.split(".")]  # train.betas -> optim.adamw.betas: nested groups
        node = out
        for part in parents:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                child = node[part] = dict(child)
            node = child
        if leaf in node and node[leaf] != value:
            raise RenameError(f"{section}.{old}={value!r} and {section}.{group}.{name}={node[leaf]!r} are one "
                              f"setting: keep {section}.{group}.{name}")
        node[leaf] = value
    return out


def upgrade_model_fields(fields_: dict) -> dict:
    """Stored ModelConfig fields in today's schema: flat fields moved into their groups, the legacy
    `attention_pattern` (L local, G global) turned into layer_types and `attention: mha` dropped."""
    fields_ = dict(fields_)
    if isinstance(fields_.get("attention"), str):  # the legacy attention kind; a mapping is today's group
        attention = fields_.pop("attention")
        if attention != "mha":
            raise RenameError(f"model.attention={attention!r} is invalid: the only attention kind ever stored is "
                              "'mha'")
    pattern = fields_.pop("attention_pattern", None)
    if pattern is not None:
        if "layer_types" in fields_:
            raise RenameError(f"model.attention_pattern={pattern!r} is invalid: set layer_types instead (not both)")
        if not pattern or set(pattern) - set(_LEGACY_LETTERS):
            raise RenameError(f"model.attention_pattern={pattern!r} is invalid: a non-empty string of L (local) "
                              "and G (global)")
        fields_["layer_types"] = [_LEGACY_LETTERS[c] for c in pattern]
    return _move(fields_, MODEL_MOVED, "model")


def upgrade_train_fields(fields_: dict) -> dict:
    """Stored TrainConfig fields in today's schema (flat fields moved into their groups)."""
    return _move(fields_, TRAIN_MOVED, "train")


def _split(key: str) -> tuple[str, str, str]:
    """('+', 'model', 'n_experts') from '+model.n_experts'; the rest of a dotted key stays in the last part."""
    prefix = key[: len(key) - len(key.lstrip("+~"))]
    bare = key[len(prefix):]
    section, _, rest = bare.partition(".")
    return prefix, section, rest


def upgrade_override(line: str) -> tuple[str, str | None]:
    """A command-line override in today's spelling, and a one-line note when it was an old spelling
    (`model.n_experts=8` -> `model.moe.n_experts=8`); other overrides come back unchanged with None."""
    key, eq, value = line.partition("=")
    prefix, section, rest = _split(key)
    moved = SECTIONS.get(section, {})
    if rest not in moved or "@" in rest:
        return line, None
    group, name = moved[rest]
    if rest == group and value.lstrip().startswith("{"):
        return line, None  # model.canon={kind: conv, ...}: the group itself
    new = f"{prefix}{section}.{group}.{name}{eq}{value}"
    return new, f"{section}.{rest} is now spelt {section}.{group}.{name}; read {line!r} as {new!r}"


def moved_group(key: str) -> str | None:
    """Today's spelling of a former group whose fields all moved into another (`model.mup` -> `model.parametrization`),
    or None."""
    section, _, rest = key.partition(".")
    targets = {group for old, (group, _) in SECTIONS.get(section, {}).items() if old.startswith(f"{rest}.")}
    return f"{section}.{targets.pop()}" if len(targets) == 1 else None


def model_column(group: str, name: str) -> str:
    """The results-table column of the model setting model.<group>.<name>: its former name for the groups of
    COLUMN_GROUPS (`norm.kind` -> norm, `attention.n_heads` -> n_heads, `parametrization.base_width` ->
    mup_base_width), else `<group>_<name>` (moe_n_experts, canon_set, ...)."""
    if group in COLUMN_GROUPS:
        for old, (g, n) in MODEL_MOVED.items():
            if (g, n) == (group, name):
                return old.replace(".", "_")
    return f"{group}_{name}"


FORMER_KEY_RULES = ("issue 40", "flat")
"""How job keys spelt moved settings before today's rule, newest first: `issue 40`, keys made before ModelConfig's
and TrainConfig's remaining flat fields moved into groups (model.n_kv_heads=2 and train.val_interval=0 flat, but
model.moe.n_experts=8 and train.length.steps=30 already as today); `flat`, keys made when every moved setting was
still spelt flat (model.n_experts=8). A run directory named by either is found."""

TRAIN_GROUPS_ISSUE_40 = ("optim", "validation", "logging", "checkpoint", "parallel")
"""The training groups whose fields moved out of TrainConfig's top level in issue 40 (train.optim.adamw.* among
them; train.optim.muon.* and lion.* were nested before)."""


def _spelt_flat(section: str, old: str, rule: str) -> bool:
    """Whether a job key made under `rule` spelt the moved setting `section.old` by its flat name."""
    group = SECTIONS[section][old][0]
    if rule == "flat":
        return True
    return rule == "issue 40" and group in (COLUMN_GROUPS if section == "model" else TRAIN_GROUPS_ISSUE_40)


def key_spelling(key: str, rule: str = "flat") -> str:
    """The spelling of an override key in a job key made under a former rule (FORMER_KEY_RULES; default: every
    moved field by its flat name, `model.moe.n_experts` -> `model.n_experts`), under which run directories made
    before today's keys were named."""
    prefix, section, rest = _split(key)
    for old, (group, name) in SECTIONS.get(section, {}).items():
        if rest == f"{group}.{name}" and _spelt_flat(section, old, rule):
            return f"{prefix}{section}.{old}"
    return key


def closest(section: str, name: str, known) -> str:
    """' (did you mean <section>.<field>?)' for the field closest to a misspelt `name` among `known` and the
    moved fields' old names (suggested in today's spelling: `train.tokns` -> train.length.tokens), or ''."""
    from slm.typecheck import did_you_mean

    known = [str(k) for k in known]
    moved = {old: f"{group}.{field}" for old, (group, field) in SECTIONS.get(section, {}).items() if old not in known}
    return did_you_mean(name, known + list(moved), f"{section}.", spelt=moved)
