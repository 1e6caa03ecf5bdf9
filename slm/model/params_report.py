"""The parameter report of a composed `model` node (what `slm-params --json` prints and the sweep's dry run counts
with): the shape, the counts of slm.model.counting, the parameters by part, the budget fit, the notes."""

from __future__ import annotations

from dataclasses import asdict
from operator import attrgetter

SHAPE_FIELDS = ("family", "kind", "n_layers", "block.repeat", "d_model", "attention.n_heads", "attention.n_kv_heads",
                "attention.head_dim", "mlp.d_ff", "vocab_size", "context_length", "embedding.tie", "layer_types",
                "mlp_types", "parametrization.init")
"""The model settings the report shows (a dotted one under its group: report["attention"]["n_heads"])."""


def params_report(model_node: dict, vocabulary: dict | None = None, cfg=None) -> dict:
    """The slm-params JSON for a composed `model` node (its vocab_size the model's: see slm.cli.params'
    `model_vocabulary`, whose answer `vocabulary` is kept as the report's `vocabulary`); `cfg`: the node's
    ModelConfig when the caller has made it already."""
    from slm.model.budget import budget_fit, config_from_spec
    from slm.model.counting import FLOPS_CONVENTION, breakdown, count
    from slm.settings import nested

    cfg = cfg if cfg is not None else config_from_spec(model_node)
    report = nested({name: attrgetter(name)(cfg) for name in SHAPE_FIELDS})
    if vocabulary is not None:
        report["vocabulary"] = {k: v for k, v in vocabulary.items() if k != "spec"}
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
