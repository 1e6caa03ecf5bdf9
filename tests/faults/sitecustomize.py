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
