"""Fault injection for subprocess tests; on PYTHONPATH only in the tests that set it.

SLM_FAULT_SAVE=N: the N-th torch.save of the process writes a few bytes, then fails with ENOSPC, as a
full disk does."""

import os

if os.environ.get("SLM_FAULT_SAVE"):
    import errno

    import torch

    _save, _calls = torch.save, [0]

    def _failing_save(obj, f, *args, **kwargs):
        _calls[0] += 1
        if _calls[0] == int(os.environ["SLM_FAULT_SAVE"]):
            if hasattr(f, "write"):
                f.write(b"part of a checkpoint")
            raise OSError(errno.ENOSPC, "No space left on device")
        return _save(obj, f, *args, **kwargs)

    torch.save = _failing_save

if os.environ.get("SLM_FAULT_SLOW_STEP"):
    # SLM_FAULT_SLOW_STEP=N: the first training step at optimizer step N waits SLM_FAULT_SLOW_SECONDS (default 120)
    # for a child process in C (os.system), where CPython runs no Python signal handler, as in one long matrix
    # product; SLM_FAULT_SLOW_MARK names a file it creates when the wait starts.
    from slm.training import module as _module

    _slow_at, _slow_done = int(os.environ["SLM_FAULT_SLOW_STEP"]), []
    _training_step = _module.LanguageModelModule.training_step

    def _slow_training_step(self, batch, batch_idx):
        if self.global_step == _slow_at and not _slow_done:
            _slow_done.append(True)
            mark = os.environ.get("SLM_FAULT_SLOW_MARK")
            if mark:
                open(mark, "w").close()
            seconds = int(os.environ.get("SLM_FAULT_SLOW_SECONDS", "120"))
            os.system(f"exec sleep {seconds} </dev/null >/dev/null 2>&1")  # holding none of the run's pipes
        return _training_step(self, batch, batch_idx)

    _module.LanguageModelModule.training_step = _slow_training_step
