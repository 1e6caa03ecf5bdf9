"""bench/gpu.py (`make bench-gpu`): one line and exit 0 without CUDA; --smoke runs the GPU code path on the CPU at
tiny shapes and prints one table, written as JSON too, and the checks of bench/gpu_checks.py (each fast path against
its reference) as a second one: they pass, and a perturbed fast path fails its row and exits 1. Nothing here needs
or times a GPU."""

from __future__ import annotations

import json

import pytest
import torch

import bench.gpu as gpu
import bench.gpu_checks as gpu_checks
from bench.gpu import COLUMNS, main

SMOKE = ["--smoke", "--threads", "1"]


def dashes(line: str) -> bool:
    return line.startswith("-") and set(line) == {"-", " "}


def table_lines(out: str, first_column: str) -> list[str]:
    """The body of the table whose header starts with `first_column`: the lines after its dashes, to a blank one."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if dashes(line) and lines[i - 1].split()[0] == first_column)
    body = []
    for line in lines[start + 1:]:
        if not line or line.startswith("wrote ") or line.startswith("checks"):
            break
        body.append(line)
    return body


def table_cells(out: str, first_column: str) -> list[dict[str, str]]:
    """The table whose header starts with `first_column`, as {column: cell} per row (the dashes give the spans)."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if dashes(line) and lines[i - 1].split()[0] == first_column)
    spans, pos = [], 0
    for run in lines[at].split("  "):
        spans.append((pos, pos + len(run)))
        pos += len(run) + 2
    names = [lines[at - 1][a:b].strip() for a, b in spans]
    return [{n: line[a:b].strip() if n != names[-1] else line[a:].strip() for n, (a, b) in zip(names, spans)}
            for line in table_lines(out, first_column)]


def table_rows(out: str) -> list[list[str]]:
    """The figures' table, split on the column gaps: part, family."""
    lines = out.splitlines()
    header = lines[next(i for i, line in enumerate(lines) if dashes(line)) - 1]
    assert header.split()[:4] == ["part", "family", "variant", "batch"]
    return [line.split()[:2] for line in table_lines(out, "part")]


def test_without_cuda_it_says_so_in_one_line_and_exits_0(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out_json = tmp_path / "gpu.json"
    assert main(["--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("bench-gpu: no CUDA device here: ")
    assert not out_json.exists()


def test_smoke_prints_one_table_and_writes_it_as_json(capsys, tmp_path):
    out_json = tmp_path / "gpu.json"
    assert main([*SMOKE, "--families", "gemma3,llama3,dllm", "--parts", "train,decode", "--json", str(out_json)]) == 0
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
    assert report["checks"] == [] and not any(line.startswith("checks") for line in out.splitlines())  # none asked


CHECKED = [("flex", k) for k in ("causal+window", "bidirectional+block", "causal+document",
                                 "bidirectional+block+document", "causal+window+softcap")] + [
    ("loss", "chunked"), ("loss", "chunked mdlm"), ("loss", "chunked softcap"), ("loss", "liger"),
    ("decode", "chain"), ("compile", "loss"), ("compile", "grads"), ("learn", "50 steps")]


def test_smoke_checks_pass_and_print_their_own_table_after_the_figures(capsys, tmp_path):
    out_json = tmp_path / "gpu.json"
    assert main([*SMOKE, "--families", "llama3", "--parts", "checks,train", "--warmup-steps", "0", "--windows", "1",
                 "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    report = json.loads(out_json.read_text())
    checks = report["checks"]
    assert report["check_columns"] == list(gpu_checks.COLUMNS) and report["checks_failed"] == []
    assert [(c["check"], c["name"]) for c in checks] == CHECKED
    assert all(c["family"] == "llama3" and "error" not in c for c in checks)
    liger = checks[CHECKED.index(("loss", "liger"))]
    assert liger["ok"] is None and liger["note"] == "skipped: Liger is CUDA-only"
    compared = [c for c in checks if c is not liger and c["check"] != "learn"]
    assert all(c["ok"] is True and 0 <= c["max_abs_diff"] <= c["tolerance"] for c in compared)
    flex = [c for c in checks if c["check"] == "flex"]
    assert all(list(c["tensors"]) == ["out"] and c["tolerance"] > 0 for c in flex)  # no flex backward on a CPU
    loss = [c for c in checks if c["check"] == "loss" and c is not liger]
    assert all(set(c["tensors"]) == {"loss", "dh", "dW"} for c in loss)
    decode = checks[CHECKED.index(("decode", "chain"))]
    assert decode["tokens"] == decode["equal_tokens"] == 16 * gpu_checks.DECODE_NEW  # 16 ragged prompts
    assert "chained eager vs per-step eager" in decode["compared"]
    assert set(checks[CHECKED.index(("compile", "loss"))]["tensors"]) == {"init", "trained"}
    learn = checks[-1]
    assert learn["ok"] is True and len(learn["losses"]) == gpu_checks.LEARN_STEPS
    assert learn["drop"] >= gpu_checks.LEARN_MARGIN and learn["first_loss"] > learn["last_loss"]
    # the figures' table first, then the checks' own, with its columns, and the verdict
    assert table_rows(out) == [["train", "llama3"]]
    table = table_cells(out, "check")
    assert [list(cells) for cells in table] == [list(gpu_checks.COLUMNS)] * len(CHECKED)
    assert [cells["check"] for cells in table] == [f"{c} {n}" for c, n in CHECKED]
    assert [cells["ok"] for cells in table] == ["skipped: Liger is CUDA-only" if c is liger else "ok" for c in checks]
    assert all(cells["family/shape"].split()[0] == "llama3" for cells in table)
    assert "checks: 12 passed, 1 skipped" in out.splitlines()


def _perturb_flex(monkeypatch):
    """FlexAttention off by 1e-3 wherever a sliding window masks."""
    import slm.components.flex as flex

    real = flex.flex_attend

    def wrong(q, k, v, masking, *args, **kwargs):
        out = real(q, k, v, masking, *args, **kwargs)
        return out + 1e-3 if masking.window is not None else out

    monkeypatch.setattr(flex, "flex_attend", wrong)
    return ["flex causal+window (llama3)", "flex causal+window+softcap (llama3)"]


def _perturb_loss(monkeypatch):
    """The chunked loss 0.1% high (and so its gradients)."""
    import slm.objectives.linear_ce as linear_ce

    real = linear_ce.linear_cross_entropy
    monkeypatch.setattr(linear_ce, "linear_cross_entropy", lambda *a, **k: real(*a, **k) * 1.001)
    return [f"loss {n} (llama3)" for n in ("chunked", "chunked mdlm", "chunked softcap")]


def _perturb_decode(monkeypatch):
    """The chain's last token of every row one id off."""
    from slm.model.generate import Decoder

    real = Decoder._run_chain

    def wrong(self, *args, **kwargs):
        out = real(self, *args, **kwargs).clone()
        out[:, -1] = (out[:, -1] + 1) % self.model.cfg.vocab_size
        return out

    monkeypatch.setattr(Decoder, "_run_chain", wrong)
    return ["decode chain (llama3)"]


@pytest.mark.parametrize("check, perturb", [("flex", _perturb_flex), ("loss", _perturb_loss),
                                            ("decode", _perturb_decode)])
def test_a_perturbed_fast_path_fails_its_row_and_exits_1_after_printing_everything(monkeypatch, capsys, tmp_path,
                                                                                      check, perturb):
    failing = perturb(monkeypatch)
    out_json = tmp_path / "gpu.json"
    assert main([*SMOKE, "--families", "llama3", "--parts", "checks", "--checks", check,
                 "--json", str(out_json)]) == 1
    out = capsys.readouterr().out
    report = json.loads(out_json.read_text())
    assert report["checks_failed"] == failing
    rows = {f"{c['check']} {c['name']} ({c['family']})": c for c in report["checks"]}
    assert all(rows[name]["ok"] is False and rows[name]["max_abs_diff"] > rows[name]["tolerance"] for name in failing)
    assert all(c["ok"] is not False for name, c in rows.items() if name not in failing)  # the others still pass
    table = {cells["check"]: cells["ok"] for cells in table_cells(out, "check")}
    assert {name for name, ok in table.items() if ok.startswith("FAIL")} == {n.rsplit(" (", 1)[0] for n in failing}
    assert f"checks FAILED ({len(failing)}): {', '.join(failing)}" in out
    assert out.rstrip().splitlines()[-1] == f"wrote {out_json}"  # everything printed, the JSON written


def test_decode_divergences_at_near_ties_pass_and_the_others_fail():
    class Flat(torch.nn.Module):
        """Logits 0 everywhere but token 7's, 1: tokens other than 7 tie."""

        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(1))

        def forward(self, idx):
            z = torch.zeros(*idx.shape, 10)
            z[..., 7] = 1.0
            return z

    prompts, ref = [[0], [0]], [[1, 2, 3], [4, 5, 6]]
    tie = gpu_checks.judge_tokens(Flat(), prompts, [[1, 2, 9], [4, 5, 6]], ref, allowed_rows=0)
    assert tie["ok"] and tie["near_ties"] == 1 and tie["max_abs_diff"] == 0.0 and tie["equal_tokens"] == 5
    off = gpu_checks.judge_tokens(Flat(), prompts, [[1, 2, 3], [4, 7, 6]], ref, allowed_rows=0)
    assert not off["ok"] and off["rows_beyond_tie"] == 1 and off["max_abs_diff"] == 1.0 and off["equal_tokens"] == 4
    assert gpu_checks.judge_tokens(Flat(), prompts, [[1, 2, 3], [4, 7, 6]], ref, allowed_rows=1)["ok"]  # MoE's


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
    report = json.loads(out_json.read_text())
    rows = report["rows"]
    assert [r["part"] for r in rows] == ["train", "decode"]
    assert all(r["note"].startswith("skipped: ") and "--budget-s" in r["note"] for r in rows)
    checks = report["checks"]  # skipped is not failed: exit 0
    assert [c["check"] for c in checks] == list(gpu_checks.CHECKS) and report["checks_failed"] == []
    assert all(c["ok"] is None and c["note"].startswith("skipped: ") and "--budget-s" in c["note"] for c in checks)
    assert "checks: 0 passed, 5 skipped" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--families", "llama3,nope"], "--families nope is not a preset of sweeps/families_70m.yaml"),
    (["--hf-families", "nope"], "--hf-families nope is not a preset"),
    (["--parts", "train,eval"], "argument --parts: 'train,eval' is invalid"),
    (["--checks", "flex,nope"], "argument --checks: 'flex,nope' is invalid: a comma-separated list of flex, loss"),
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
