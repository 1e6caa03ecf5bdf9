"""Evaluation: lm-evaluation-harness scoring of slm checkpoints, offline tasks, decode throughput.

    slm.eval.lm            the `slm` model registered with lm-eval (import it to register); lm_diffusion: its
                           diffusion models' estimator; lm_args: its model_args string
    slm.eval.spec          EvalSpec: what to evaluate, the `eval.*` settings (from a config node or slm-eval's flags)
    slm.eval.checks        what the settings name that must exist here, and what depends on the model
    slm.eval.run           evaluate a run directory or checkpoint: tasks, lm-eval, the results files
    slm.eval.documents     the per-document file (paired comparisons)
    slm.eval.summary       the scores' summary and the record's `eval` section
    slm.eval.throughput    batch-1 decode tokens/s, time to first token, peak memory
    slm.eval.offline_tasks documents of the offline tasks (task YAMLs in slm/eval/tasks/)
    slm.eval.toolcall_tasks the function-calling task's documents and per-item scores (slm_toolcall*.yaml)
    slm.eval.provenance    the git revision lm-eval and the run record note
    python -m slm.eval     lm-eval's own CLI with the `slm` model registered (slm/eval/__main__.py)

Nothing heavy is imported here: lm-eval loads only with `slm.eval.lm`.
"""

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
"""The shipped lm-eval task YAMLs (slm_shakespeare_bpb, slm_shakespeare_mc, group slm_offline;
slm_toolcall, slm_toolcall_templates, slm_toolcall_long, slm_toolcall_combos, group slm_toolcall_all)."""

RENAMED_TASKS = {"slm_shakespeare_ppl": "slm_shakespeare_bpb"}
"""Shipped tasks by their former names: records that use an old name are read under the new one
(analysis.collect), and asking for an old name is answered with the new one."""

__all__ = ["RENAMED_TASKS", "TASKS_DIR"]
