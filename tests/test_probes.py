"""The synthetic probes (slm/probes, `slm-probes`, docs/probes.md): the generator is a function of (task, seed, sizes),
its splits never share a prompt, every task's records read through slm's records reader with the char tokenizer
fitted on the probes' corpus; an sft run on a probe records the completion accuracies, which equal those computed
here from its saved weights; bad input is one line, exit 2, nothing written; analysis.probes' proxy on hand-built
records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from slm.cli.probes import run as probes_cli
from slm.data import load_tokenizer
from slm.data.config import RecordsSettings
from slm.data.preference_records import read_sft_records
from slm.data.records import prepare_records
from slm.data.tokenizers import CharTokenizer
from slm.model.weights import load_model
from slm.probes.files import ProbeSizes, generate, split_of, write_probes
from slm.probes.tasks import ALPHABET, TASKS
from tests.test_train_cli import record, run_dir, slm_train

SMALL = ProbeSizes(train=300, valid=40)


@pytest.mark.parametrize("name", TASKS)
def test_the_generator_is_a_function_of_task_seed_and_sizes_and_its_splits_are_disjoint(name):
    first = generate(name, 0, SMALL)
    assert first == generate(name, 0, SMALL)
    other = generate(name, 1, SMALL)
    assert first != other
    assert (len(first["train"]), len(first["valid"])) == (300, 40)
    for records in (first, other):
        valid = [r["prompt"] for r in records["valid"]]
        assert len(set(valid)) == len(valid)  # each validation prompt once
        assert all(split_of(p) == "valid" for p in valid)
    # the split is the prompt's, whatever the seed: no seed's validation prompt is any seed's training prompt
    train = {r["prompt"] for records in (first, other) for r in records["train"]}
    assert not train & {r["prompt"] for records in (first, other) for r in records["valid"]}
    assert set("".join(r["prompt"] + r["completion"] for r in first["train"])) <= set(ALPHABET)


def test_each_task_holds_what_its_answer_needs():
    recall = generate("recall", 0, SMALL)["train"][:50]
    for r in recall:  # the queried key is shown with its value
        pairs, key = r["prompt"].split("?")
        assert key + r["completion"] in [pairs[i:i + 2] for i in range(0, len(pairs), 2)]
    for r in generate("selective_copy", 0, SMALL)["train"][:50]:
        assert r["prompt"][:-1].replace(".", "") == r["completion"]
    for r in generate("compression", 0, SMALL)["train"][:50]:
        assert r["prompt"] == r["completion"] + "|"
    facts = {}
    for r in generate("memorization", 0, SMALL)["train"]:  # one value per key across records
        keys = r["prompt"][:-1]
        for i, value in enumerate(r["completion"]):
            assert facts.setdefault(keys[2 * i:2 * i + 2], value) == value


def test_every_tasks_records_read_through_the_records_reader(tmp_path):
    manifest = write_probes(tmp_path, SMALL, seed=0)
    tok = CharTokenizer(sorted(ALPHABET), unk=False, eot=False)
    assert manifest["tasks"] == list(TASKS) and manifest["alphabet"] == ALPHABET
    for name in TASKS:
        train, valid = tmp_path / f"{name}_train.jsonl", tmp_path / f"{name}_valid.jsonl"
        assert len(read_sft_records(train, tokenize=tok.encode, context_length=65)) == 300
        records = prepare_records(RecordsSettings(train=str(train), valid=str(valid)), "sft", tok, 64)
        assert (len(records.train), len(records.valid)) == (300, 40)
        assert manifest["files"][f"{name}_valid.jsonl"]["records"] == 40


@pytest.mark.parametrize("args, needle", [
    (["--train", "0"], "argument --train: 0: must be >= 1"),
    (["--tasks", "recall,copy"], "argument --tasks: 'recall,copy' is invalid: a comma-separated list of recall"),
    (["--seed", "x"], "argument --seed: invalid int value: 'x'"),
    (["--valid", "2000000"], "argument --valid: 2000000: must be <= 1000000"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, args, needle):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        probes_cli([str(out), *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("slm-probes: error: ") and needle in err
    assert not out.exists()


def test_an_output_path_that_is_a_file_is_refused(tmp_path, capsys):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(SystemExit) as exit_:
        probes_cli([str(path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "is not a directory" in err and err.count("\n") == 1 and path.read_text() == "x"


# ------------------------------------------------------------------ the accuracies of sft's validation
def _by_hand(model, batch) -> tuple[float, int, int, int, int]:
    """(summed completion NLL, scored tokens, right tokens, right completions, rows) of one batch, from the logits."""
    ids, scored = batch["ids"], batch["scored"]
    with torch.no_grad():
        logits = model(ids[:, :-1]).float()  # (N, T - 1, V)
    targets = ids[:, 1:]
    nll = torch.nn.functional.cross_entropy(logits[scored], targets[scored], reduction="sum")
    right = (logits.argmax(-1) == targets) | ~scored  # (N, T - 1): a position not scored counts as right
    return float(nll), int(scored.sum()), int((right & scored).sum()), int(right.all(-1).sum()), ids.shape[0]


@pytest.mark.parametrize("impl", ["plain", "chunked"])
def test_validation_adds_the_accuracies_and_keeps_the_nll(tmp_path, impl):
    from slm.model import ModelConfig, Transformer
    from slm.objectives.loss_settings import LossSettings
    from slm.objectives.sft import SFT

    write_probes(tmp_path, SMALL, seed=0, tasks=["selective_copy"])
    tok = CharTokenizer(sorted(ALPHABET), unk=False, eot=False)
    path = str(tmp_path / "selective_copy_valid.jsonl")
    valid = prepare_records(RecordsSettings(train=path, valid=path), "sft", tok, 64).valid
    torch.manual_seed(0)
    model = Transformer(ModelConfig(family="llama3", n_layers=1, d_model=32, vocab_size=tok.vocab_size,
                                    context_length=64, attention=dict(n_heads=2)))
    batch = valid.batch(range(16), pad_id=0, context_length=64)
    with torch.no_grad():  # a model that has learned a little: some positions right, not all
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    objective = SFT(LossSettings(impl=impl))
    with torch.no_grad():
        total, count, extras = objective.validate(model, batch)
        nll, nll_count = objective.nll(model, batch)
    assert torch.equal(total, nll) and count == nll_count  # the NLL as before, bit for bit
    want, tokens, right, exact, rows = _by_hand(model, batch)
    assert float(total) == pytest.approx(want, rel=1e-5) and count == tokens
    assert [(float(v), n) for v, n in extras.values()] == [(right, tokens), (exact, rows)]
    assert list(extras) == ["token_acc", "exact_acc"] and 0 < right < tokens


def test_an_sft_run_on_a_probe_records_the_accuracies_of_its_saved_weights(tmp_path):
    probes = tmp_path / "probes"
    write_probes(probes, ProbeSizes(train=200, valid=40), seed=0, tasks=["recall"])
    out = slm_train(tmp_path, "data=probes", "train.objective=sft", f"+data.records.train={probes}/recall_train.jsonl",
                    f"+data.records.valid={probes}/recall_valid.jsonl", "model=llama3",
                    "model.n_layers=2", "model.d_model=32", "model.attention.head_dim=16", "model.attention.n_kv_heads=null",
                    "model.context_length=64",
                    "eval=none", "train.length.steps=12", "train.batch_size=16", "train.lr=3e-3",
                    "train.validation.interval=0", "train.logging.progress_bar=false")
    assert out.returncode == 0, out.stderr[-2000:]
    path = run_dir(tmp_path)
    got = record(path)["eval"]
    model, tok = load_model(path / "model").eval(), load_tokenizer(path / "model")
    assert tok.vocab_size == len(ALPHABET)  # fitted on the probes' corpus: the alphabet
    valid = prepare_records(RecordsSettings(train=str(probes / "recall_valid.jsonl"),
                                            valid=str(probes / "recall_valid.jsonl")), "sft", tok, 64).valid
    sums = [_by_hand(model, valid.batch(range(lo, min(lo + 16, 40)), 0, 64)) for lo in range(0, 40, 16)]
    nll, tokens, right, exact, rows = (sum(s[i] for s in sums) for i in range(5))
    assert got["val_token_acc"] == pytest.approx(right / tokens, abs=1e-12) and tokens == rows == 40
    assert got["val_exact_acc"] == pytest.approx(exact / rows, abs=1e-12)
    assert got["val_nll"] == pytest.approx(nll / tokens, rel=1e-5) and math.isfinite(got["val_nll"])


# ------------------------------------------------------------------ analysis.probes
def _probe_records(root: Path) -> None:
    """Two families x 3 tasks x 2 seeds; gpt2's seed 1 has no memorization run (left out); flops 10 per token."""
    from tests.test_analysis_collect import make_record, write

    nll = {"gpt2": {"recall": 1.0, "compression": 0.5, "memorization": 0.3},
           "llama3": {"recall": 0.8, "compression": 0.1, "memorization": 0.6}}
    for family, tasks in nll.items():
        for task, value in tasks.items():
            for seed in (0, 1):
                if (family, task, seed) == ("gpt2", "memorization", 1):
                    continue
                record = make_record(family=family, seed=seed, tokens=100 * (1 + seed), val_nll=value + 0.1 * seed)
                record["config"]["data"]["name"] = record["data"]["name"] = task
                record["model"]["flops_per_token"] = 10
                record["eval"]["val_token_acc"] = 1 - value / 2
                write(root / f"data.name={task},model={family},train.seed={seed}", record)


def test_the_probe_proxy_is_the_mean_over_tasks_per_configuration_and_seed(tmp_path):
    from analysis import collect
    from analysis.probes import judge, point_of, proxies

    _probe_records(tmp_path / "probes_cpu")
    found = proxies(collect(tmp_path / "probes_cpu"))
    nll, acc = found["probe_nll"], found["probe_acc"]
    assert nll.tasks == ["compression", "memorization", "recall"]
    assert nll.values == {"gpt2": {0: pytest.approx(1.8 / 3)},  # seed 1 lacks memorization: left out
                          "llama3": {0: pytest.approx(1.5 / 3), 1: pytest.approx(1.8 / 3)}}
    assert nll.notes == ["gpt2, seed 1: no val_nll for memorization: left out"]
    assert acc.values["gpt2"][0] == pytest.approx(1 - 1.8 / 6) and acc.higher_is_better
    assert acc.oriented()["gpt2"][0] == pytest.approx(-(1 - 1.8 / 6))
    # the battery's compute: the sum over tasks of flops_per_token x tokens, the mean over seeds
    assert nll.train_flops == {"gpt2": 3 * 10 * 100, "llama3": (3 * 1000 + 3 * 2000) / 2}
    assert nll.share(target_flops=1e5) == pytest.approx((3000 + 4500) / 2 / 1e5)
    # judged against a target order: llama3 better at the target, as the probe says; the other way round, not
    agree = judge(nll, {"gpt2": {0: 2.0, 1: 2.1}, "llama3": {0: 1.9}}, target_flops=1e5)
    assert (agree["accuracy"], agree["pairs"]) == (1.0, 1) and agree["share"] == pytest.approx(0.0375)
    assert agree["low"] <= agree["accuracy"] <= agree["high"] and agree["snr"] > 0  # llama3 has 2 seeds
    assert judge(nll, {"gpt2": {0: 2.0}, "llama3": {0: 1.9}}, draws=0)["low"] is None
    assert judge(nll, {"gpt2": {0: 1.0}, "llama3": {0: 2.0}})["accuracy"] == 0.0
    assert point_of("data.name=recall,model=moe,model.moe.top_k=1,train.seed=1") == "model=moe,model.moe.top_k=1"
    by_point = proxies(collect(tmp_path / "probes_cpu"), config="point")["probe_nll"]
    assert set(by_point.values) == {"model=gpt2", "model=llama3"}
    two = proxies(collect(tmp_path / "probes_cpu"), tasks=["recall", "compression"])["probe_nll"]
    assert two.values["gpt2"] == {0: pytest.approx(0.75), 1: pytest.approx(0.85)} and not two.notes


def test_the_probe_proxies_join_a_ladders_decision_at_their_share_of_a_target_run(tmp_path):
    """analysis.probes.add_to: the battery's order against the target's (worked by hand: b's probes are worse than
    c's although b beats c at the target: 2 of 3 pairs agree), its share of a target run's compute (branch rows left
    out), and a row in the decision's table."""
    import pandas as pd

    from analysis.decide import DecideResult, markdown
    from analysis.probes import add_to

    top = {"a": {0: 1.0, 1: 1.1}, "b": {0: 2.0, 1: 2.1}, "c": {0: 3.0, 1: 3.1}}  # the truth at the target, a < b < c
    result = DecideResult(config="family", rung="param_budget", target=2e5, top=top, proxies=["val_nll"])
    ladder = pd.DataFrame({"param_budget": [2e5, 2e5, 2e5], "train_flops": [1e12, 3e12, 0.5e12],
                           "branch": [None, None, 0.5]})  # the target's runs: 2e12 on average, the branch aside
    rows = []
    probe_nll = {"a": 1.0, "b": 3.0, "c": 2.0}
    for family, nll in probe_nll.items():
        for seed in (0, 1):
            for task in ("recall", "memorization"):
                rows.append({"family": family, "data": task, "seed": seed, "status": "completed",
                             "val_nll": nll + 0.1 * seed, "val_token_acc": 1 / nll, "train_flops": 1e10,
                             "param_budget": 5e4, "run": f"model={family},data.name={task},train.seed={seed}"})
    notes = add_to(result, ladder, pd.DataFrame(rows), draws=0)
    assert notes == []
    row = next(r for r in result.rows if r.proxy == "probe_nll")
    assert row.accuracy == pytest.approx(2 / 3) and row.configurations == 3 and row.rung == 5e4
    assert row.share == pytest.approx(2e10 / 2e12)  # two tasks of 1e10 for one seed, over 2e12
    assert "probe_nll" in result.proxies and "| probe_nll | 50000 |" in markdown(result)
    # a sweep of one task is a proxy of its own, named for it, judged beside the battery (memorization alone has the
    # battery's values here, a 1.0 < c 2.0 < b 3.0: the same 2 of 3 pairs, at half the compute); the same table twice
    # is refused
    one = pd.DataFrame([r for r in rows if r["data"] == "memorization"])
    add_to(result, ladder, one, draws=0)
    alone = next(r for r in result.rows if r.proxy == "probe_nll_memorization")
    assert alone.accuracy == pytest.approx(2 / 3) and alone.share == pytest.approx(1e10 / 2e12)
    assert result.proxies[-2:] == ["probe_nll_memorization", "probe_acc_memorization"]
    with pytest.raises(ValueError, match="probe_nll_memorization is judged already"):
        add_to(result, ladder, one, draws=0)
    # a ladder at a second token regime beside the target's (1 token per parameter, a fifth of the compute): the
    # share is of a run at the target's regime (5 tokens per parameter), the one the decision was judged at
    both = pd.DataFrame({"param_budget": [2e5, 2e5, 2e5], "tokens": [1e6, 1e6, 2e5],
                         "train_flops": [2e12, 2e12, 0.4e12], "branch": [None, None, None]})
    judged = DecideResult(config="family", rung="param_budget", target=2e5, top=top, proxies=["val_nll"], regime=5.0)
    add_to(judged, both, one, draws=0)
    assert next(r for r in judged.rows if r.proxy == "probe_nll_memorization").share == pytest.approx(1e10 / 2e12)
    assert judged.means[("probe_nll_memorization", 5e4)] == {"a": pytest.approx(1.05), "b": pytest.approx(3.05),
                                                            "c": pytest.approx(2.05)}


def test_a_job_keys_spelling_of_a_literal_names_the_ladders_configuration():
    from analysis.probes import same_name

    assert same_name("model.attention.qk_norm=True,model.x=None") == "model.attention.qk_norm=true,model.x=none"
    assert same_name("model.attention.qk_norm=true") == same_name("model.attention.qk_norm=True")
    assert same_name("model.norm.kind=rmsnorm") == "model.norm.kind=rmsnorm"
