"""The shard cache: reuse without re-tokenizing, fitted vocabularies reused, two concurrent jobs on the
same uncached source (both succeed, one tokenizes, identical shards), leftovers of killed jobs."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from slm.data import DataError, prepare, shards
from slm.data.tokenizers import CharTokenizer

WIKITEXT = Path(__file__).parent / "data" / "wikitext2_valid_excerpt.txt"
LOCAL = {"sources": [{"name": "wiki", "kind": "local", "paths": [str(WIKITEXT)], "valid_fraction": 0.1}]}
GPT2 = {"kind": "gpt2", "eot": True}


def test_second_prepare_reuses_shards(tmp_path, monkeypatch):
    node = {"cache_dir": str(tmp_path), **LOCAL}
    first = prepare(node, GPT2)
    assert first.describe()["sources"][0]["reused_cache"] == {"train": False, "valid": False}
    mtimes = [os.stat(s.path).st_mtime_ns for s in (first.sources[0].train, first.sources[0].valid)]
    monkeypatch.setattr(shards, "_write", lambda *a, **k: pytest.fail("tokenized again"))
    second = prepare(node, GPT2)
    assert second.describe()["sources"][0]["reused_cache"] == {"train": True, "valid": True}
    assert [os.stat(s.path).st_mtime_ns for s in (second.sources[0].train, second.sources[0].valid)] == mtimes
    assert np.array_equal(first.sources[0].train.tokens(), second.sources[0].train.tokens())
    meta = json.loads(first.sources[0].train.path.with_suffix(".json").read_text())
    assert meta["n_tokens"] == first.sources[0].train.n_tokens and meta["source"] == "wiki"


def test_cache_key_changes_with_content_and_tokenizer(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("one two three\n" * 100)
    node = {"cache_dir": str(tmp_path / "c"), "sources": [{"kind": "local", "paths": [str(text)]}]}
    keys = lambda p: p.describe()["sources"][0]["cache_keys"]["train"]  # noqa: E731
    a = keys(prepare(node, GPT2))
    assert keys(prepare(node, {"kind": "gpt2", "eot": False})) != a
    assert keys(prepare(node, {"kind": "char"})) != a
    text.write_text("one two four\n" * 100)
    assert keys(prepare(node, GPT2)) != a
    assert a.startswith("local.train.gpt2.")


def test_fitted_vocabulary_is_cached(tmp_path, monkeypatch):
    node = {"cache_dir": str(tmp_path)}
    first = prepare(node, {"kind": "char"})
    monkeypatch.setattr(CharTokenizer, "fit_counts", lambda texts: pytest.fail("fitted again"))
    second = prepare(node, {"kind": "char"})
    assert second.tokenizer.symbols == first.tokenizer.symbols
    assert len(list((tmp_path / "vocab").glob("char.*.json"))) == 1


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SLM_CACHE", str(tmp_path / "env"))
    prepare({}, {"kind": "char"})
    assert len(list((tmp_path / "env" / "tokens").glob("*.bin"))) == 3  # train, valid, test


def test_leftovers_of_a_killed_job_are_removed(tmp_path):
    key = prepare({"cache_dir": str(tmp_path / "probe"), **LOCAL}, GPT2).describe()["sources"][0]["cache_keys"]["train"]
    stale = tmp_path / "c" / "tokens" / f"{key}.bin.tmp-99999"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half a shard")
    prepare({"cache_dir": str(tmp_path / "c"), **LOCAL}, GPT2)
    assert not stale.exists()


def test_damaged_entry_is_reported(tmp_path):
    p = prepare({"cache_dir": str(tmp_path), **LOCAL}, GPT2)
    with open(p.sources[0].train.path, "r+b") as f:
        f.truncate(10)
    with pytest.raises(DataError, match=r"^cache entry .*\.bin is damaged \(10 bytes for \d+ tokens\); delete it and rerun$"):
        prepare({"cache_dir": str(tmp_path), **LOCAL}, GPT2)


JOB = """
import json, sys
from slm.data import prepare
p = prepare(json.loads(sys.argv[1]), json.loads(sys.argv[2]))
print(json.dumps(p.describe()["sources"][0]["reused_cache"]))
"""


def test_two_concurrent_jobs_tokenize_once(tmp_path):
    """Both jobs start while the shards' locks are held (as if a third job were tokenizing), so they
    really race for them once released: both succeed, each shard is tokenized by exactly one."""
    keys = prepare({"cache_dir": str(tmp_path / "probe"), **LOCAL}, GPT2).describe()["sources"][0]["cache_keys"]
    node = {"cache_dir": str(tmp_path / "shared"), **LOCAL}
    locks = tmp_path / "shared" / "locks"
    locks.mkdir(parents=True)
    held = []
    for key in keys.values():
        fd = os.open(locks / f"{key}.lock", os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    jobs = [subprocess.Popen([sys.executable, "-c", JOB, json.dumps(node), json.dumps(GPT2)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    deadline = time.time() + 30
    while time.time() < deadline and not all(_waiting(job) for job in jobs):
        time.sleep(0.1)
    for fd in held:
        os.close(fd)
    results = [job.communicate(timeout=60) for job in jobs]
    for job, (out, err) in zip(jobs, results):
        assert job.returncode == 0, err
        assert "another job is tokenizing wiki/train; waiting for it" in err
    reused = [json.loads(out) for out, _ in results]
    for split in ("train", "valid"):
        assert sorted(r[split] for r in reused) == [False, True], reused
    probe, shared = (tmp_path / "probe" / "tokens"), (tmp_path / "shared" / "tokens")
    for key in keys.values():
        assert (probe / f"{key}.bin").read_bytes() == (shared / f"{key}.bin").read_bytes()
    assert not list(shared.glob("*.tmp-*"))


def _waiting(job: subprocess.Popen) -> bool:
    """The job has ended or waits for a lock (/proc/locks lists blocked requests with "->")."""
    if job.poll() is not None:
        return True
    return any("->" in line and f" {job.pid} " in line for line in Path("/proc/locks").read_text().splitlines())
