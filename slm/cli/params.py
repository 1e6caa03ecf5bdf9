"""`slm-params <hydra overrides> [--json]`: exact parameter and FLOP counts of a model config.

    slm-params model=gpt2                                   # 124,439,808 parameters
    slm-params model=gpt2 model.n_layers=32 model.d_model=384
    slm-params model=llama3 model.n_layers=12 model.param_budget=70e6   # solve the width, then the MLP size
    slm-params model=moe                                    # 327,371,136 in total, 67,258,752 active per token
    slm-params model=titans_mac --json                      # every field; params_breakdown: the memory's parts

Prints a short summary: the shape, total, active and non-embedding parameters, training FLOPs per token and, with
model.param_budget, how the solved model fits its budget. --json prints every field as one JSON object instead
(the shape, the counts, params_breakdown by part, budget_fit, the FLOPs convention, notes): the form to parse.
Without a model= override it counts slm-train's default model (debug). Counts come from the config alone (no
model is allocated); see slm.model.counting.
"""

from __future__ import annotations

import sys
from dataclasses import asdict

from slm.cli.config import reports_user_errors
from slm.pipes import quiet_on_closed_pipe

SHAPE_FIELDS = ("family", "kind", "n_layers", "layer_repeat", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                "vocab_size", "context_length", "tie_embeddings", "layer_types", "mlp_types", "init")


def params_report(model_node: dict) -> dict:
    """The slm-params JSON for a composed `model` node."""
    from slm.model import FLOPS_CONVENTION, config_from_spec, count
    from slm.model.budget import budget_fit
    from slm.model.counting import breakdown

    cfg = config_from_spec(model_node)
    report = {name: getattr(cfg, name) for name in SHAPE_FIELDS}
    if "moe" in cfg.mlp_types:
        report["moe"] = asdict(cfg.moe)
    if "mac" in cfg.layer_types:
        report["memory"] = asdict(cfg.memory)
    report.update(vars(count(cfg)))
    report["params_breakdown"] = breakdown(cfg)
    budget = model_node.get("param_budget")
    if budget is not None:
        counted = model_node.get("budget_count") or "total"
        report["param_budget"] = float(budget)
        report["budget_count"] = counted
        report["budget_error"] = (report[f"params_{counted}"] - float(budget)) / float(budget)
        report["budget_fit"] = budget_fit(cfg).to_dict()  # which knobs moved: d_model, and the MLP size if it did
    report["flops_convention"] = FLOPS_CONVENTION
    report["notes"] = cfg.notes()
    return report


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
    layers = f"{r['n_layers']} layers" + (f", each applied {r['layer_repeat']} times" if r["layer_repeat"] > 1 else "")
    heads = f"{r['n_heads']} heads" + (f" ({r['n_kv_heads']} KV)" if r["n_kv_heads"] != r["n_heads"] else "")
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
        mlp = f"d_ff {r['d_ff']}"
    return (f"{r['family']}: {layers}, d_model {r['d_model']}, {heads} of {r['head_dim']}, {mlp}{mixers}, context "
            f"{r['context_length']}, vocabulary {r['vocab_size']:,}")


def summary(r: dict) -> list[str]:
    """The default output: the shape, the counts slm-train and the dry run report, the budget fit, the notes."""
    lines = [shape_line(r),
             f"  parameters     {_count(r['params_total'])}",
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


def check_overrides(overrides: list[str]) -> None:
    """ValueError naming the first override that is not a model setting: the counts come from the model node
    alone, so train.*, data.*, tokenizer=... would be ignored without a word."""
    for arg in overrides:
        key, sep, _ = arg.lstrip("+~").partition("=")
        if sep and key.split(".")[0].split("@")[0] != "model":
            raise ValueError(f"{arg}: slm-params takes model settings only (model=<preset>, model.<field>=...); "
                             f"{key} does not change the counts, so leave it out (slm-train takes it)")


@reports_user_errors("slm-params")
def run(argv: list[str]) -> None:
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip())
        return
    as_json = "--json" in argv
    overrides = [arg for arg in argv if arg != "--json"]
    check_overrides(overrides)
    from omegaconf import OmegaConf

    from slm.cli.config import compose_config

    report = params_report(OmegaConf.to_container(compose_config(overrides, prog="slm-params").model, resolve=True))
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
