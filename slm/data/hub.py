"""Streaming a Hugging Face hub dataset with `datasets`, failing fast without a network.

Before the first request: with HF_HUB_OFFLINE or HF_DATASETS_OFFLINE set, fail at once; otherwise open a
socket to the hub endpoint (name lookup included) and fail if that does not succeed within 3 s. Either way the error is one
line naming the dataset and how to use local files instead.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Iterator
from urllib.parse import urlparse

from slm.data.config import SourceConfig
from slm.data.errors import DataError

OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
CONNECT_TIMEOUT_S = 3.0


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


LOCAL_FILES = "use local files instead, e.g. data=local 'data.sources.0.paths=[/data/*.parquet]' (jsonl and text work too)"


def _unreachable(cfg: SourceConfig, why: str, instead: str) -> DataError:
    return DataError(f"hub dataset {cfg.dataset!r} ({cfg.where}) cannot be reached: {why}; {instead}")


def check_reachable(cfg: SourceConfig, instead: str = LOCAL_FILES) -> None:
    """Fail at once, in one line ending with `instead` (what to do offline), if the hub cannot be reached."""
    for var in OFFLINE_VARS:
        if _truthy(os.environ.get(var)):
            raise _unreachable(cfg, f"{var}={os.environ[var]} (offline mode)", instead)
    from huggingface_hub import constants

    if getattr(constants, "HF_HUB_OFFLINE", False):
        raise _unreachable(cfg, "huggingface_hub is in offline mode", instead)
    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    outcome: list[OSError | None] = []

    def connect() -> None:  # in a thread, so that a hanging DNS lookup is bounded too
        try:
            socket.create_connection((url.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
            outcome.append(None)
        except OSError as err:
            outcome.append(err)

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT_S)
    if not outcome or outcome[0] is not None:
        why = outcome[0] if outcome else "no answer"
        raise _unreachable(cfg, f"no connection to {constants.ENDPOINT} within {CONNECT_TIMEOUT_S:g} s ({why})",
                           instead)


def documents(cfg: SourceConfig, skip: int = 0, take: int | None = None, split: str | None = None,
              instead: str = LOCAL_FILES) -> Iterator[str]:
    """Texts of the streamed split (`split`, else cfg.split), after the first `skip` documents, at most `take`."""
    check_reachable(cfg, instead)
    from datasets import load_dataset

    ds = load_dataset(cfg.dataset, name=cfg.subset, split=split or cfg.split, streaming=True, revision=cfg.revision)
    if cfg.text_field not in (ds.column_names or [cfg.text_field]):
        raise DataError(f"hub dataset {cfg.dataset!r} has no field {cfg.text_field!r} "
                        f"(fields: {', '.join(ds.column_names)}); set {cfg.where}.text_field")
    ds = ds.select_columns([cfg.text_field])
    if skip:
        ds = ds.skip(skip)
    if take is not None:
        ds = ds.take(take)
    for row in ds:
        text = row[cfg.text_field]
        if text:
            yield text
