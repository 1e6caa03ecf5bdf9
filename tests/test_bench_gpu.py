"""bench/gpu.py (`make bench-gpu`): one line and exit 0 without CUDA; --smoke runs the GPU code path on the CPU at
tiny shapes and prints one table, written as JSON too. Nothing here needs or times a GPU."""

from __future__ import annotations

import json

import pytest
import torch

import bench.gpu as gpu
from bench.gpu import COLUMNS, main

SMOKE = ["--smoke", "--threads", "1"]


def table_rows(out: str) -> list[list[str]]:
    """The table's body (the lines after the column header's dashes), split on the column gaps."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("------"))
    header = lines[start - 1]
    assert header.split()[:4] == ["part", "family", "variant", "batch"]
    return [line.split()[:2] for line in lines[start + 1:] if line and not line.startswith("wrote ")]


def test_without_cuda_it_says_so_in_one_line_and_exits_0(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out_json = tmp_path / "gpu.json"
    assert main(["--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("bench-gpu: no CUDA device here: ")
    assert not out_json.exists()


def test_smoke_prints_one_table_and_writes_it_as_json(capsys, tmp_path):
    out_json = tmp_path / "gpu.json"
    assert main([*SMOKE, "--families", "gemma3,llama3,dllm", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("bench-gpu ") and "torch " + torch.__version__ in out.splitlines()[0]
    report = json.loads(out_json.read_text())
    assert report["columns"] == list(COLUMNS)
    rows = report["rows"]
    # the table's order is the command's: gemma3, llama3, dllm; train first, then decode at batch 1 and 16
    assert [(r["part"], r["family"], r.get("batch")) for r in rows] == [
        ("train", "gemma3", "2x64"), ("decode", "gemma3", "1"), ("decode", "gemma3", "16"),
        ("train", "llama3", "2x64"), ("decode", "llama3", "1"), ("decode", "llama3", "16"),
        ("train", "dllm", "2x64"), *[("decode", "dllm", b) for b in ("1", "16") for _ in range(3)]]
    assert table_rows(out) == [[r["part"], r["family"]] for r in rows]
    for r in rows:
        assert "error" not in r, r
        assert list(r["cells"]) == list(COLUMNS)
        assert r["tokens_per_s"]["min"] <= r["tokens_per_s"]["median"] <= r["tokens_per_s"]["max"]
        assert r["tokens_per_s"]["min"] > 0
    train = {r["family"]: r for r in rows if r["part"] == "train"}
    assert all(r["finite_losses"] and r["timed_steps"] == 2 and r["loss_impl"] == "chunked" for r in train.values())
    assert train["gemma3"]["attention_used"] == {"causal+window": "sdpa", "causal": "sdpa"}
    assert train["dllm"]["attention_used"] == {"bidirectional": "sdpa"}
    assert train["llama3"]["variant"] == "32 eager causal_lm" and train["dllm"]["variant"] == "32 eager mdlm"
    assert train["llama3"]["mfu"] is None and train["llama3"]["cells"]["MFU"] == "-"  # a CPU has no known peak
    # the trainer's FLOPs per token (slm.model.count) of the config it would train
    from slm.model import count
    smoke_llama3 = gpu.setup("llama3", ["model=llama3"], True).model_cfg
    assert train["llama3"]["flops_per_token"] == count(smoke_llama3).flops_per_token
    decode = [r for r in rows if r["part"] == "decode"]
    llama = [r for r in decode if r["family"] == "llama3"]
    assert all(r["reference"] == "transformers static" and r["ratio"]["median"] > 0 for r in llama)
    assert all(r["same_tokens_fraction"] == 1.0 for r in llama)  # the same weights in both: the same greedy tokens
    assert all(r["reference"] == "-" and "ratio" not in r for r in decode if r["family"] == "gemma3")
    dllm = [r for r in decode if r["family"] == "dllm"]
    assert [r["variant"] for r in dllm] == [f"mdlm cache={c}" for c in ("none", "prefix", "dual")] * 2
    assert all(r["reference"].startswith("slm AR") and r["tokens_per_step_per_row"] == 4.0 for r in dllm)
    assert report["header"]["smoke"] and report["header"]["sweep"] == "families_70m"


def test_a_failing_family_prints_its_error_and_the_others_go_on(monkeypatch, capsys, tmp_path):
    import slm.training.hardware

    real = gpu.measure_train
    monkeypatch.setattr(slm.training.hardware, "peak_flops", lambda device, precision: 1e12)  # a known peak

    def measure(s, opts):
        if s.family == "gpt2":
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(s, opts)

    monkeypatch.setattr(gpu, "measure_train", measure)
    out_json = tmp_path / "gpu.json"
    assert main([*SMOKE, "--families", "gpt2,llama3", "--parts", "train", "--json", str(out_json)]) == 0
    rows = json.loads(out_json.read_text())["rows"]
    assert [(r["family"], r["part"]) for r in rows] == [("gpt2", "train"), ("llama3", "train")]
    assert rows[0]["note"] == "error: RuntimeError: CUDA out of memory (simulated)" and "tokens_per_s" not in rows[0]
    assert "error" not in rows[1] and rows[1]["tokens_per_s"]["median"] > 0
    # MFU as ThroughputMonitor computes it: flops per token x tokens/s / peak FLOP/s
    llama3 = rows[1]
    mfu = llama3["flops_per_token"] * llama3["tokens_per_s"]["median"] / 1e12
    assert llama3["mfu"]["median"] == pytest.approx(mfu) and llama3["cells"]["MFU"] == f"{mfu:.1%}"
    assert "error: RuntimeError: CUDA out of memory (simulated)" in capsys.readouterr().out


def test_past_the_budget_every_part_is_skipped_and_says_so(capsys, tmp_path):
    out_json = tmp_path / "gpu.json"
    assert main([*SMOKE, "--families", "llama3", "--budget-s", "0.001", "--json", str(out_json)]) == 0
    rows = json.loads(out_json.read_text())["rows"]
    assert [r["part"] for r in rows] == ["train", "decode"]
    assert all(r["note"].startswith("skipped: ") and "--budget-s" in r["note"] for r in rows)


@pytest.mark.parametrize("args, message", [
    (["--families", "llama3,nope"], "--families nope is not a preset of sweeps/families_70m.yaml"),
    (["--hf-families", "nope"], "--hf-families nope is not a preset"),
    (["--parts", "train,eval"], "argument --parts: 'train,eval' is invalid"),
    (["--batches", "0"], "--batches [0] is invalid"),
    (["--windows", "0"], "--windows 0 is invalid: an integer >= 1"),
])
def test_bad_arguments_are_one_line_and_exit_2(capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        main([*SMOKE, *args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@pytest.mark.slow
def test_smoke_every_family_against_transformers_where_it_converts(tmp_path):
    out_json = tmp_path / "gpu.json"
    assert main([*SMOKE, "--hf-families", "all", "--json", str(out_json)]) == 0
    rows = json.loads(out_json.read_text())["rows"]
    assert {r["family"] for r in rows} == set(gpu.FAMILIES)
    assert all("error" not in r for r in rows if r["part"] == "train")
    decode = {(r["family"], r["batch"]): r for r in rows if r["part"] == "decode" and r["family"] != "dllm"}
    for family in ("gpt2", "llama3", "lfm2", "moe"):  # slm.interop.hf converts these
        assert decode[family, "1"]["same_tokens_fraction"] == 1.0, decode[family, "1"]
    for family in ("qwen3", "gemma3", "llama3_canon"):  # and refuses these, which keep slm's own figure
        row = decode[family, "1"]
        assert row["note"].startswith("transformers: ValueError") and row["tokens_per_s"]["median"] > 0
