"""Callbacks: the rolling last.ckpt wherever the run directory lives, throughput and MFU, the per-step training log
used for exact loss curves, the CSV log's rows kept across a resume, the checkpoint taken on a Slurm preemption
signal or a stop signal (Ctrl-C, SIGTERM), the step checkpoints kept on request (train.checkpoint.keep_every,
train.checkpoint.keep_steps), and the checkpoints a wsd run writes for its decay branches."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import threading
import time
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from slm.atomic import atomic_write
from slm.training.checkpoints import LAST
from slm.training.hardware import peak_flops
from slm.training.train_log import kept_lines


class RunCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint for a run's rolling checkpoints/last.ckpt (save_last only, every `interval` steps),
    which keeps writing that file wherever the run directory now lives.

    Lightning's keeps absolute paths in its checkpointed state (dirpath, last_model_path, best_model_path): after a
    run directory is copied or moved and resumed, it no longer recognises its last.ckpt, writes last-v1.ckpt beside it
    (its version counter) and leaves last.ckpt stale, so a later kill resumes from old progress. Here the state holds
    file names only, read back into the current directory, and the file is always last.ckpt (no version counter).
    The state key is ModelCheckpoint's, so the state of checkpoints written before reads in too."""

    def __init__(self, dirpath: str | os.PathLike, interval: int):
        super().__init__(dirpath=dirpath, save_top_k=0, save_last=True, every_n_train_steps=interval,
                         enable_version_counter=False)

    def _generate_state_key(self, **kwargs) -> str:
        return f"{ModelCheckpoint.__qualname__}{kwargs!r}"

    def state_dict(self) -> dict:
        state = super().state_dict()
        del state["dirpath"]
        for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
            state[key] = Path(state[key]).name if state[key] else ""
        state["best_k_models"] = {Path(path).name: score for path, score in state["best_k_models"].items()}
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        def here(path: str) -> str:  # a name, or an absolute path of wherever the run was (older checkpoints)
            return os.path.join(self.dirpath, Path(path).name) if path else ""

        self.best_model_score = state_dict.get("best_model_score")
        self.best_model_path = here(state_dict.get("best_model_path", ""))
        self.kth_best_model_path = here(state_dict.get("kth_best_model_path", ""))
        self.kth_value = state_dict.get("kth_value", self.kth_value)
        self.best_k_models = {here(path): score for path, score in (state_dict.get("best_k_models") or {}).items()}
        self.last_model_path = here(LAST) if state_dict.get("last_model_path") else ""


def step_ended(trainer, batch_idx: int) -> bool:
    """Whether the batch that just ended was an optimizer step's last micro-batch (always, without accumulation):
    the step boundary, where a callback counts, logs or checkpoints. A resumed loader starts at a step boundary,
    so batch_idx % accumulation is the micro-batch's place in its step whether Lightning restored the count or not."""
    return (batch_idx + 1) % max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1)) == 0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class ThroughputMonitor(L.Callback):
    """Logs tokens/s, FLOPs per token and MFU over windows of `interval` steps, and keeps totals.

    MFU = flops_per_token * tokens/s / (peak FLOP/s of one device x `devices`) (None where the peak is unknown):
    tokens_per_step is the whole job's (all ranks), so tokens/s and MFU are the job's.
    Windows are contiguous (each starts where the last ended), so loop overhead, data loading and
    checkpointing between steps count as training time; only validation is excluded.
    """

    def __init__(self, tokens_per_step: int, flops_per_token: int, precision: str, interval: int,
                 peak: float | None = None, devices: int = 1):
        self.devices = devices
        self.tokens_per_step, self.flops_per_token = tokens_per_step, flops_per_token
        self.precision, self.interval, self.peak = precision, interval, peak
        self.train_seconds = 0.0
        self.steps = 0
        self._window_start: float | None = None
        self._window_steps = 0

    def on_train_start(self, trainer, pl_module) -> None:
        if self.peak is None:
            one = peak_flops(pl_module.device, self.precision)
            self.peak = one * self.devices if one else one

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._window_start is None:
            _sync(pl_module.device)
            self._window_start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not step_ended(trainer, batch_idx):
            return
        self._window_steps += 1
        if self._window_steps >= self.interval or trainer.global_step >= trainer.max_steps:
            self._close_window(pl_module)

    def on_validation_start(self, trainer, pl_module) -> None:
        if self._window_start is not None and self._window_steps:
            self._close_window(pl_module)
        self._window_start = None

    def on_train_end(self, trainer, pl_module) -> None:
        if self._window_start is not None and self._window_steps:
            self._close_window(pl_module)

    def _close_window(self, pl_module) -> None:
        _sync(pl_module.device)
        seconds = time.perf_counter() - self._window_start
        self.train_seconds += seconds
        self.steps += self._window_steps
        rate = self._window_steps * self.tokens_per_step / seconds
        metrics = {"perf/tokens_per_s": rate, "perf/flops_per_token": float(self.flops_per_token)}
        if self.peak:
            metrics["perf/mfu"] = self.flops_per_token * rate / self.peak
        pl_module.log_dict(metrics)
        self._window_start, self._window_steps = time.perf_counter(), 0

    def totals(self) -> dict:
        """Training steps, seconds, tokens/s and MFU of this process (validation excluded)."""
        rate = self.steps * self.tokens_per_step / self.train_seconds if self.train_seconds else None
        mfu = self.flops_per_token * rate / self.peak if (rate and self.peak) else None
        return {"session_steps": self.steps, "train_seconds": self.train_seconds, "tokens_per_s": rate, "mfu": mfu,
                "peak_flops": self.peak}


class StepLog(L.Callback):
    """Appends one JSON line per optimizer step (step, loss, lr; attention_block with a block curriculum) to `path`.

    On resume the lines past the restored step (and damaged lines a kill or an accident left past it) are dropped
    first (slm.training.train_log, which names them in a note), so the file always holds exactly one line per
    completed step: the loss curve of a resumed run equals an uninterrupted one. Rows arrive as the module reads
    its losses back (on the logging cadence, and before every checkpoint, so a checkpoint's steps are always in the
    file); a diverged run's file ends at the last finite step.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._file = None

    def on_train_start(self, trainer, pl_module) -> None:
        kept = kept_lines(self.path, trainer.global_step)  # TrainLogError: slm.runs.job refuses such a run first
        if kept.note:
            print(f"slm-train: note: {kept.note}", flush=True)
        text = "".join(line + "\n" for line in kept.lines).encode("utf-8")
        atomic_write(self.path, lambda f: f.write(text))
        self._file = self.path.open("a")

    def _write(self, pl_module, settle: bool = False) -> None:
        """Append the rows the module has read back (LanguageModelModule.settle; `settle`: read back first)."""
        if self._file is None:
            return
        if settle:
            pl_module.settle()
        rows = pl_module.take_settled()
        if rows:
            self._file.write("".join(json.dumps(row) + "\n" for row in rows))
            self._file.flush()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._write(pl_module)  # what the logging cadence read back; no host sync here

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self._write(pl_module, settle=True)  # every step the checkpoint holds is in the file before it is written

    def on_train_end(self, trainer, pl_module) -> None:
        self._write(pl_module, settle=True)
        if self._file is not None:
            self._file.close()
            self._file = None

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._write(pl_module)  # what was read back; nothing is read from a device that may have failed
        if self._file is not None:
            self._file.close()
            self._file = None


class KeptCSVLogger(CSVLogger):
    """Lightning's CSVLogger, except that opening a log directory that exists leaves its metrics.csv in place
    (Lightning's removes it): CSVHistory rewrites it once training starts from the restored step, so a resume that
    fails or is refused before its first step keeps every row."""

    @property
    @rank_zero_experiment
    def experiment(self) -> _KeptWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _KeptWriter(log_dir=self.log_dir)
        return self._experiment


class _KeptWriter(ExperimentWriter):
    """Lightning's CSV writer without the removal of an existing metrics.csv when it is made."""

    def _check_log_dir_exists(self) -> None:
        pass


def _csv_rows(path: Path) -> tuple[list[tuple[dict, int]], list[int]]:
    """The rows of a metrics.csv with their steps, and the line numbers of rows that are damaged (no step, a field
    too many or too few, bytes that are not UTF-8)."""
    if not path.exists():
        return [], []
    rows, damaged = [], []
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        for row in reader:
            try:
                if None in row or None in row.values() or any("\ufffd" in v for v in row.values()):
                    raise ValueError("damaged")
                rows.append((row, int(float(row["step"]))))
            except (ValueError, KeyError, TypeError):
                damaged.append(reader.line_num)
    return rows, damaged


class CSVHistory(L.Callback):
    """Keeps a resumed run's logs/csv/metrics.csv rows from before the restored step.

    The run's CSV logger (KeptCSVLogger) leaves the file in place when it opens it; once training starts from the
    restored step, this rewrites it (atomically) with the rows logged before that step (later ones come again; a
    damaged row is dropped, with a note) and tells the logger its columns, so that it appends after them. Until then
    the file is untouched."""

    def __init__(self, logger: KeptCSVLogger):
        self.logger = logger

    def on_train_start(self, trainer, pl_module) -> None:
        writer = self.logger.experiment
        path = Path(writer.metrics_file_path)
        rows, damaged = _csv_rows(path)
        if damaged:
            where = ", ".join(map(str, damaged[:3])) + (f" and {len(damaged) - 3} more" if len(damaged) > 3 else "")
            print(f"slm-train: note: {path}: damaged row{'s' if len(damaged) > 1 else ''} at line"
                  f"{'s' if len(damaged) > 1 else ''} {where} dropped", flush=True)
        kept = [row for row, step in rows if step < trainer.global_step]
        writer.metrics_keys = sorted(set().union(*kept)) if kept else []
        if not kept:
            path.unlink(missing_ok=True)  # the logger writes a new file, header first
            return
        text = io.StringIO()
        out = csv.DictWriter(text, fieldnames=writer.metrics_keys)
        out.writeheader()
        out.writerows(kept)
        atomic_write(path, lambda f: f.write(text.getvalue().encode("utf-8")))


STOP_SIGNALS = ("INT", "TERM")
"""Signals that stop a run at the next step boundary with a checkpoint: Ctrl-C, and kill / scancel / a container
stop (SIGTERM)."""


def _signal_name(signum: int) -> str:
    return signal.Signals(signum).name


def _say(text: str) -> None:
    """Write a line to stderr from a signal handler (os.write: no buffered stream to re-enter)."""
    try:
        os.write(2, (text + "\n").encode())
    except OSError:
        pass


def _gather_pending(trainer, pending: list[int]) -> list[int]:
    """The signals noted on any rank (a max-reduce of one flag per signal number): one small collective per step,
    beside the gradients' (Lightning's own SIGTERM notice costs one too)."""
    flags = torch.zeros(65, device=trainer.strategy.root_device)
    for signum in pending:
        flags[signum] = 1
    flags = trainer.strategy.reduce(flags, reduce_op="max")
    return [int(i) for i in torch.nonzero(flags).flatten().tolist()]


class SignalCheckpoint(L.Callback):
    """On a preemption or stop signal, saves `path` after the current optimizer step, then stops or passes it on.

    Preemption: Slurm sends the signal before a time limit (submitit's `--signal USR2@<delay>`) or on
    `scancel --signal=USR2`; the signal is $SUBMITIT_PREEMPT_SIGNAL, USR2 by default. The handler only notes it;
    at the next step boundary the full training state is written (atomically, to the file that ModelCheckpoint
    keeps as last.ckpt, so resuming is exact), and the handler that was installed before this callback's runs:
    submitit's, which requeues the job and exits. Without one, training stops with SystemExit(128 + signal); an
    ignored signal is only checkpointed.

    Stop (`stop_signals`, SIGINT and SIGTERM): the same checkpoint at the next step boundary, then training stops
    with SystemExit(128 + signal) (130 for Ctrl-C, 143 for SIGTERM), whatever handler was there before (Lightning's
    SIGTERM notice, submitit's bypass). A second stop signal while the step finishes stops at once, without a
    checkpoint (SystemExit(128 + signal); the run resumes from its last one). A stop signal that is ignored when
    training starts (a job started in the background by a script, nohup) stays ignored.

    `step` is the step checkpointed on a signal (None if none came), `signal_name` the signal it came for;
    `aborted` the name of a second stop signal that stopped the run without a checkpoint (else None).
    """

    def __init__(self, path: Path, signal_name: str | None = None, stop_signals: tuple[str, ...] = STOP_SIGNALS):
        self.path = Path(path)
        self.signal_name = "SIG" + (signal_name or os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))
        self.signum = getattr(signal, self.signal_name)
        self.stop_signums = [num for num in (getattr(signal, "SIG" + name) for name in stop_signals)
                             if num != self.signum]
        self.step: int | None = None
        self.aborted: str | None = None
        self._pending: list[int] = []
        self._previous: dict[int, object] = {}

    def on_train_start(self, trainer, pl_module) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (self.signum, *self.stop_signums):
            if signum in self.stop_signums and signal.getsignal(signum) == signal.SIG_IGN:
                continue
            self._previous[signum] = signal.signal(signum, self._note)

    def _note(self, signum, frame) -> None:
        name = _signal_name(signum)
        if signum in self.stop_signums:
            if any(s in self.stop_signums for s in self._pending):  # the second one: stop now
                self.aborted = name
                _say(f"slm-train: {name} again: stopping now, without a checkpoint (the run resumes from its last "
                     "one)")
                raise SystemExit(128 + signum)
            again = "Ctrl-C" if signum == signal.SIGINT else name
            _say(f"slm-train: {name}: stopping after this step, with a checkpoint ({again} again stops at once, "
                 "without one)")
        if signum not in self._pending:
            self._pending.append(signum)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not step_ended(trainer, batch_idx):
            return
        if trainer.world_size > 1:  # every rank stops at the same step: a signal any rank got counts for all
            self._pending = _gather_pending(trainer, self._pending)
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        trainer.save_checkpoint(self.path, weights_only=False)  # atomic: the trainer's AtomicCheckpointIO
        self.step = trainer.global_step
        stop = next((signum for signum in pending if signum in self.stop_signums), None)
        if self.signum in pending:
            self.signal_name = _signal_name(self.signum)
            previous = self._restore(self.signum)
            if callable(previous):
                previous(self.signum, None)  # submitit: requeue this job, then sys.exit; if it returns, go on
            elif previous != signal.SIG_IGN and stop is None:
                raise SystemExit(128 + self.signum)
        if stop is not None:
            self.signal_name = _signal_name(stop)
            self._restore()
            raise SystemExit(128 + stop)

    def _restore(self, signum: int | None = None):
        """Put back the handler(s) this callback replaced (`signum`'s, or all); the one of `signum` (else None)."""
        previous = None
        for num in [signum] if signum is not None else list(self._previous):
            if num in self._previous:
                previous = self._previous.pop(num)
                if previous is not None:  # None: a handler not installed from Python, which cannot be put back
                    signal.signal(num, previous)
        return previous

    def on_train_end(self, trainer, pl_module) -> None:
        self._pending = []  # a signal after the last step: the run is finishing anyway
        self._restore()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._restore()


class RunPaused(Exception):
    """Raised by PauseAt once the run's state at its pause step is saved (slm.runs.job records the run `paused`)."""

    def __init__(self, step: int):
        super().__init__(f"paused at step {step}")
        self.step = step


class PauseAt(L.Callback):
    """train.length.pause_at: at the end of optimizer step `step` the full training state is saved to `path` (the
    file ModelCheckpoint keeps as last.ckpt, atomically, as SignalCheckpoint saves it: resuming is exact), then
    training stops with RunPaused. Nothing is saved from a diverged state. List it last."""

    def __init__(self, step: int, path: Path):
        self.step, self.path = int(step), Path(path)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not step_ended(trainer, batch_idx) or trainer.global_step != self.step \
                or getattr(pl_module, "diverged", None) is not None:
            return
        trainer.save_checkpoint(self.path, weights_only=False)  # every rank: a collective save
        raise RunPaused(self.step)


class BranchCheckpoints(L.Callback):
    """Saves the full training state of given steps into other files: a wsd run's checkpoint at the step each decay
    branch begins its decay, its resume checkpoint (slm.runs.branches). `points` is [(step, path, written)]: at the
    end of optimizer step `step` the state is saved to `path` (atomically, through the trainer's checkpoint IO: a
    diverged run or non-finite weights write nothing), then `written()` is called (None: nothing), on rank 0.

    List it before KeepCheckpoints and SignalCheckpoint, and it runs before the rolling last.ckpt (Lightning calls
    checkpoint callbacks last): the run's own checkpoint never passes a branch's step before the branch's file
    exists, so a run killed at any moment still writes it when resumed."""

    def __init__(self, points: list[tuple[int, Path, object]]):
        self.points = [(int(step), Path(path), written) for step, path, written in points]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not step_ended(trainer, batch_idx) or getattr(pl_module, "diverged", None) is not None:
            return
        for step, path, written in self.points:
            if step != trainer.global_step:
                continue
            if trainer.is_global_zero:
                path.parent.mkdir(parents=True, exist_ok=True)
            trainer.save_checkpoint(path, weights_only=False)  # every rank: a collective save
            if trainer.is_global_zero and path.exists() and callable(written):
                written()


class KeepCheckpoints(L.Callback):
    """Saves the full training state of the steps `keeps(step)` names as `directory`/step-<N>.ckpt (atomically,
    through the trainer's checkpoint IO), next to the rolling last.ckpt; nothing deletes them.

    List it before SignalCheckpoint: a step that is both kept and interrupted is saved before the run stops (the
    resumed run starts after that step and would not come back to it)."""

    def __init__(self, directory: Path, keeps):
        self.directory, self.keeps = Path(directory), keeps

    @staticmethod
    def name(step: int) -> str:
        return f"step-{step}.ckpt"

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if getattr(pl_module, "diverged", None) is None and self.keeps(step) and step_ended(trainer, batch_idx):
            trainer.save_checkpoint(self.directory / self.name(step), weights_only=False)
