"""Shared fixtures: compose the real Hydra config tree, and tiny model configs."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from omegaconf import OmegaConf

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:  # started in the background (nohup, `&` in a script): the
    signal.signal(signal.SIGINT, signal.default_int_handler)  # signal tests need Ctrl-C, here and in their children

_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:  # `make test` runs -n 2: each worker (and the commands it starts) gets its share of the cores
    _SHARE = str(max(1, (os.cpu_count() or 1) // _WORKERS))
    os.environ.setdefault("OMP_NUM_THREADS", _SHARE)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

PRESETS = ["gpt2", "llama3", "qwen3", "gemma3", "llama3_canon", "mobilellm", "mobilellm_ls", "design_40m", "debug", "lfm2", "moe", "dllm", "dllm_canon", "dllm_recursive", "dhara",
           "titans_mac"]


def compose_model_node(*overrides: str) -> dict:
    """The `model` node of conf/config.yaml with overrides, as the CLI composes it."""
    from slm.cli.config import compose_config

    return OmegaConf.to_container(compose_config(list(overrides)).model, resolve=True)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """Torch on one thread for the test: small ops run faster, and steadier on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _logging_handlers():
    """A file handler an in-process command adds to the root logger (Hydra's job logging: <run dir>/train.log) is
    closed after its test: a later test's logging would write into a directory the first may have removed."""
    import logging

    root = logging.getLogger()
    before = set(root.handlers)
    yield
    for handler in [h for h in root.handlers if h not in before and isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)
        handler.close()
