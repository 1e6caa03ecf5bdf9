"""`slm-params <hydra overrides>`: exact parameter and FLOP counts of a model config, as one JSON object.

    slm-params model=gpt2                                   # 124,439,808 parameters
    slm-params model=gpt2 model.n_layers=32 model.d_model=384
    slm-params model=llama3 model.n_layers=12 model.param_budget=70e6   # solve the width, then the MLP size
    slm-params model=moe                                    # 327,371,136 in total, 67,258,752 active per token
    slm-params model=titans_mac                             # 67,757,964; params_breakdown shows the memory's parts

Without a model= override it counts slm-train's default model (debug). Counts come from the config alone (no
model is allocated); see slm.model.counting.
"""

from __future__ import annotations

import json
import sys

from omegaconf import OmegaConf

from slm.cli.config import compose_config, reports_user_errors

SHAPE_FIELDS = ("family", "n_layers", "layer_repeat", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                "vocab_size", "context_length", "tie_embeddings", "layer_types", "mlp_types", "init")
MOE_FIELDS = ("n_experts", "top_k", "expert_d_ff", "shared_expert_d_ff")
MEMORY_FIELDS = ("memory_layers", "memory_segment", "memory_chunk", "memory_depth", "memory_hidden", "memory_heads",
                 "persistent_tokens", "memory_lr")


def params_report(model_node: dict) -> dict:
    """The slm-params JSON for a composed `model` node."""
    from slm.model import FLOPS_CONVENTION, config_from_spec, count
    from slm.model.budget import budget_fit
    from slm.model.counting import breakdown

    cfg = config_from_spec(model_node)
    report = {name: getattr(cfg, name) for name in SHAPE_FIELDS}
    if "moe" in cfg.mlp_types:
        report.update({name: getattr(cfg, name) for name in MOE_FIELDS})
    if "mac" in cfg.layer_types:
        report.update({name: getattr(cfg, name) for name in MEMORY_FIELDS})
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


@reports_user_errors("slm-params")
def run(argv: list[str]) -> None:
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip())
        return
    cfg = compose_config(argv)
    print(json.dumps(params_report(OmegaConf.to_container(cfg.model, resolve=True)), indent=2))


def main() -> None:
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
