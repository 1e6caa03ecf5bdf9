"""`slm-params <hydra overrides> [--json]`: exact parameter and FLOP counts of the model slm-train would build.

    slm-params                                              # slm-train's default: the debug model, char vocabulary
    slm-params model=gpt2 tokenizer=gpt2                    # 124,439,808 parameters
    slm-params model=gpt2 model.n_layers=32 model.d_model=384 tokenizer=gpt2
    slm-params model=llama3 model.n_layers=12 model.param_budget=70e6 tokenizer=gpt2   # solve the width, then the MLP
    slm-params model=dllm tokenizer=gpt2 tokenizer.pad_vocab_multiple=64   # + the mask token mdlm reserves, padded
    slm-params model=titans_mac --json                      # every field; params_breakdown: the memory's parts

Takes slm-train's settings that change what it builds: model=<preset> and model.<field>=..., tokenizer=... and
data=... (and their fields), train.objective (a masked diffusion objective reserves a mask token). The vocabulary is
the one slm-train gives the model: the tokenizer's, with that mask token, padded to tokenizer.pad_vocab_multiple; a
char or word vocabulary is fitted on the data's training text (once, cached for slm-train), except on hub data,
which slm-params does not download: then model.vocab_size is counted, and the output says so. A model.vocab_size
of the preset or the command line is replaced by the tokenizer's, as slm-train replaces it.

Prints a short summary: the shape, the vocabulary and where it came from, total, active and non-embedding
parameters, training FLOPs per token and, with model.param_budget, how the solved model fits its budget. --json
prints every field as one JSON object instead (the shape, vocabulary, the counts, params_breakdown by part,
budget_fit, the FLOPs convention, notes): the form to parse. Counts come from the config alone (no model is
allocated); see slm.model.counting.
"""

from __future__ import annotations

import sys

from slm.cli.config import reports_user_errors
from slm.pipes import quiet_on_closed_pipe


def _count(n: float) -> str:
    """124,439,808 (124.4M)."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n:,.0f} ({n / size:.4g}{unit})"
    return f"{n:,.0f}"


def shape_line(r: dict) -> str:
    """The model in one line: family, network, width, heads, MLP, context, vocabulary."""
    if r["kind"] != "transformer":
        return (f"{r['family']}: a {r['kind']} window model over {r['context_length']} tokens, embeddings "
                f"{r['d_model']} wide, vocabulary {r['vocab_size']:,}")
    repeat, a = r["block"]["repeat"], r["attention"]
    layers = f"{r['n_layers']} layers" + (f", each applied {repeat} times" if repeat > 1 else "")
    heads = f"{a['n_heads']} heads" + (f" ({a['n_kv_heads']} KV)" if a["n_kv_heads"] != a["n_heads"] else "")
    types = r["layer_types"]
    if types == ["attn"]:
        mixers = ""
    elif len(types) <= 6:  # a repeating unit, e.g. LFM2's conv/conv/attn
        mixers = f", mixers {'/'.join(types)}"
    else:
        mixers = ", mixers " + " + ".join(f"{types.count(t)} {t}" for t in dict.fromkeys(types))
    if "moe" in r["mlp_types"]:
        moe = r["moe"]
        mlp = f"{moe['n_experts']} experts of {moe['expert_d_ff']}, top-{moe['top_k']}"
    else:
        mlp = f"d_ff {r['mlp']['d_ff']}"
    return (f"{r['family']}: {layers}, d_model {r['d_model']}, {heads} of {a['head_dim']}, {mlp}{mixers}, context "
            f"{r['context_length']}, vocabulary {r['vocab_size']:,}")


def summary(r: dict) -> list[str]:
    """The default output: the shape, where the vocabulary came from, the counts slm-train and the dry run report,
    the budget fit, the notes."""
    lines = [shape_line(r)]
    if "vocabulary" in r:
        lines.append(f"  vocabulary     {r['vocabulary']['from']}")
    lines += [f"  parameters     {_count(r['params_total'])}",
              f"  active         {_count(r['params_active'])} per token",
              f"  non-embedding  {_count(r['params_non_embedding'])}",
              f"  FLOPs/token    {r['flops_per_token']:.3e} (training: forward + backward, PaLM convention)"]
    if "param_budget" in r:
        moved = (r.get("budget_fit") or {}).get("moved") or "d_model"
        lines.append(f"  budget         {r['param_budget']:,.0f} {r['budget_count']} parameters: "
                     f"{100 * r['budget_error']:+.2f}% (solved: {moved})")
    lines += [f"  note: {note}" for note in r["notes"]]
    lines.append("  (--json: every field, the parameters by part, the FLOPs convention)")
    return lines


COUNTED_GROUPS = ("model", "tokenizer", "data")
"""The config groups whose settings change what slm-train builds (with train.objective: a mask token)."""


def check_overrides(overrides: list[str]) -> None:
    """ValueError naming the first override that cannot change the counts (train.lr, seed=...): slm-params would
    ignore it without a word."""
    for arg in overrides:
        key, sep, _ = arg.lstrip("+~").partition("=")
        if sep and key.split(".")[0].split("@")[0] not in COUNTED_GROUPS and key != "train.objective":
            raise ValueError(f"{arg}: slm-params takes the settings that change what slm-train builds (model=..., "
                             f"model.<field>=..., tokenizer=..., data=..., train.objective=...); {key} does not "
                             "change the counts, so leave it out (slm-train takes it)")


class _NotFetched(Exception):
    """A vocabulary fitted on hub data that is not cached: slm-params does not download it."""


def _not_fetched():
    raise _NotFetched


def model_vocabulary(tokenizer_node: dict, data_node: dict, objective: str) -> dict:
    """The model's vocab_size as slm-train sets it (slm.runs.job.prepare): the tokenizer's ids, a mask token when the
    objective needs one, padded to tokenizer.pad_vocab_multiple; a char or word vocabulary fitted on the data's
    training text as slm.data.prepare fits it (the same cache entry), no shard tokenized. Returns {vocab_size (None
    for a vocabulary fitted on hub data not cached yet: nothing is downloaded), tokenizer, from (where the size came
    from, for people), spec (the ids slm-train also sets: {"embedding": {mask_token_id, document_end_id}})}."""
    from dataclasses import replace

    from slm.data.cache import cache_root
    from slm.data.config import DataConfig, TokenizerConfig
    from slm.data.prepare import build_tokenizer
    from slm.data.sources import build_source
    from slm.data.tokenizers import tokenizer_class
    from slm.objectives import tokenizer_node_for

    tok_cfg = TokenizerConfig.from_node(tokenizer_node_for(objective, tokenizer_node))
    data = DataConfig.from_node(data_node)
    data.check_tokenizer(tok_cfg)
    streams = []
    if tokenizer_class(tok_cfg.kind).fitted:  # the training streams of every source, as slm.data.prepare makes them
        weight = sum(s.weight for s in data.sources)
        for s in data.sources:
            budget = s.token_budget
            if budget is None and data.token_budget is not None:
                budget = max(1, int(data.token_budget * s.weight / weight))
            stream = build_source(s, budget).streams()["train"]
            streams.append(replace(stream, pieces=_not_fetched) if stream.remote else stream)
    try:
        tok = build_tokenizer(tok_cfg, streams, cache_root(data.cache_dir))
    except _NotFetched:
        hub = "; ".join(s.origin for s in streams if s.remote)
        return {"vocab_size": None, "tokenizer": tok_cfg.kind, "spec": {},
                "from": f"model.vocab_size, not the tokenizer's: the {tok_cfg.kind} vocabulary is fitted on {hub} "
                        "when slm-train first prepares the data; slm-params does not download it (once it is "
                        "cached, slm-params counts it)"}
    ids = tok.vocab_size - (tok.mask_id is not None)
    size = tok_cfg.padded(tok.vocab_size)
    where = (f"the {tok.kind} vocabulary fitted on {'; '.join(s.origin for s in streams)}" if streams
             else f"the {tok.name} tokenizer's")
    if size != ids:
        where += f" ({ids:,} ids)"
    if tok.mask_id is not None:
        where += f" + a mask token (train.objective={objective})"
    if size != tok.vocab_size:
        where += f", padded to a multiple of {tok_cfg.pad_vocab_multiple} (tokenizer.pad_vocab_multiple)"
    spec = {"mask_token_id": tok.mask_id} if tok.mask_id is not None else {}
    if data.pack_documents:
        spec["document_end_id"] = tok.eot_id
    spec = {"embedding": spec} if spec else {}
    return {"vocab_size": size, "tokenizer": tok.kind, "from": f"{size:,}: {where}", "spec": spec}


def composed_report(overrides: list[str]) -> dict:
    """The slm-params JSON for slm-train's overrides: the model node with the vocabulary slm-train gives it."""
    from omegaconf import OmegaConf

    from slm.cli.config import compose_config
    from slm.model import config_from_spec
    from slm.model.params_report import params_report
    from slm.objectives import OBJECTIVES, check_preset
    from slm.settings import nested

    cfg = compose_config(overrides, prog="slm-params")
    model_node, objective = OmegaConf.to_container(cfg.model, resolve=True), OmegaConf.select(cfg, "train.objective")
    try:
        OBJECTIVES.get(objective)
    except ValueError as err:  # "unknown objective 'x'; choose one of: ..."
        raise ValueError(f"train.objective={objective}: {err}") from None
    check_preset(model_node, objective)  # slm-train refuses an objective the preset contradicts
    vocabulary = model_vocabulary(OmegaConf.to_container(cfg.tokenizer, resolve=True),
                                  OmegaConf.to_container(cfg.data, resolve=True), objective)
    configured = model_node.get("vocab_size")
    if vocabulary["vocab_size"] is None:  # fitted on hub data not read yet: the configured size, said so
        vocabulary.update(vocab_size=configured, **{"from": f"{configured:,}: {vocabulary['from']}"})
    else:
        if configured != vocabulary["vocab_size"] and any(
                arg.lstrip("+~").startswith("model.vocab_size=") for arg in overrides):
            vocabulary["replaced"] = configured
            vocabulary["from"] += f"; model.vocab_size={configured} is replaced, as slm-train replaces it"
        model_node = nested({**model_node, "vocab_size": vocabulary["vocab_size"],
                             **{f"embedding.{k}": v for k, v in vocabulary["spec"].get("embedding", {}).items()}})
    cfg = config_from_spec(model_node)
    OBJECTIVES.get(objective)().check(cfg)  # slm-train's refusal of a model the objective cannot train (mdlm, causal)
    return params_report(model_node, vocabulary, cfg)


@reports_user_errors("slm-params")
def run(argv: list[str]) -> None:
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip())
        return
    as_json = "--json" in argv
    overrides = [arg for arg in argv if arg != "--json"]
    check_overrides(overrides)
    report = composed_report(overrides)
    if as_json:
        import json

        print(json.dumps(report, indent=2))
    else:
        print("\n".join(summary(report)))


@quiet_on_closed_pipe
def main() -> None:
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
