"""Where a job keeps its files: the layout of a run directory (slm.runs.job trains into it).

  result.json              the run record (slm.runs.record)
  config.yaml              the resolved config
  checkpoints/last.ckpt    Lightning checkpoint (model, optimizer, scheduler, loop, RNG), every ckpt_interval;
                           written atomically (slm.training.checkpoints): a kill or a full disk during a
                           save leaves the previous one intact; checked before a resume
  checkpoints/previous.ckpt  the checkpoint before it (a hard link), the fallback when last.ckpt is damaged
                           (`bad_checkpoint=previous`; `bad_checkpoint=restart` trains from step 0)
  checkpoints/step-<N>.ckpt  the checkpoints train.checkpoint.keep_every / train.checkpoint.keep_steps keep (never deleted; a full
                           training state, and a train.init_from source)
  model/                   final weights (model.safetensors), config.json and the tokenizer
  train_log.jsonl          one line per optimizer step: step, loss, lr; a damaged line past the checkpoint's step is
                           written again on resume, one before it refuses the resume (slm.training.train_log)
  logs/                    CSV (and TensorBoard / W&B) logger output
  .lock                    held (flock) by the process training the run; `slm-status` reads it
"""

from __future__ import annotations

from pathlib import Path

CHECKPOINT = Path("checkpoints") / "last.ckpt"
"""The rolling checkpoint a run resumes from, relative to its run directory."""
