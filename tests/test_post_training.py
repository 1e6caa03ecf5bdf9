"""Post-training stages through slm-train: data.records batches, train.objective=sft and preference (DPO and kin)
from train.init_from, the reference cached or frozen, the chain pretrain -> SFT -> DPO recorded, exact resume, and
bad records or settings refused in one line with exit 2."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from slm.data.config import RecordsSettings
from slm.data.errors import DataError
from slm.data.records import RecordOrder, prepare_records
from slm.data.tokenizers import CharTokenizer
from slm.model import ModelConfig, Transformer
from slm.objectives import OBJECTIVES
from slm.objectives.completion_logprobs import completion_logprobs
from slm.objectives.preference_objective import Preference
from slm.objectives.preference_settings import PreferenceSettings
from slm.objectives.sft import SFT
from tests.test_train_cli import assert_same_run, kill_at_step, record, run_dir, slm_train

WORDS = ["thou", "art", "good", "king", "my", "lord", "sweet", "love", "noble", "fair"]
TINY = ["model=llama3", "model.n_layers=2", "model.d_model=32", "model.attention.head_dim=16",
        "model.attention.n_kv_heads=2", "model.context_length=32", "eval=none", "train.logging.progress_bar=false",
        "train.validation.batches=2", "train.logging.interval=5", "train.batch_size=8"]


def write_records(directory: Path, n: int = 60) -> tuple[Path, Path]:
    """sft.jsonl (prompt/completion) and pairs.jsonl (the same prompts; chosen = the completion, rejected = the words
    in the prompt's order), in Tiny Shakespeare's characters (the char tokenizer's vocabulary)."""
    rng = random.Random(0)
    sft, pairs = [], []
    for _ in range(n):
        a, b = rng.sample(WORDS, 2)
        prompt = f"say {a} {b}:"
        sft.append({"prompt": prompt, "completion": f" {b} {a}\n"})
        pairs.append({"prompt": prompt, "chosen": f" {b} {a}\n", "rejected": f" {a} {b}\n"})
    paths = directory / "sft.jsonl", directory / "pairs.jsonl"
    for path, rows in zip(paths, (sft, pairs)):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


def chars_tokenizer() -> CharTokenizer:
    return CharTokenizer(sorted(set("say :\n" + "".join(WORDS) + "ab")), unk=False, eot=False)


# ------------------------------------------------------------------ records and their batches
def test_the_order_is_a_function_of_seed_and_step_and_each_epoch_covers_every_record():
    order = RecordOrder(10, 4, seed=3)
    again = RecordOrder(10, 4, seed=3)
    steps = [order.rows(s) for s in range(5)]  # 20 examples: two epochs of 10
    assert [again.rows(s) for s in (4, 0, 2)] == [steps[4], steps[0], steps[2]]  # any order of asking
    flat = sum(steps, [])
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:]) == list(range(10))
    assert flat[:10] != flat[10:]  # each epoch its own permutation
    assert order.rows(1, 1, 3) == steps[1][1:3]  # a rank's or a micro-batch's rows are the step's
    assert RecordOrder(10, 4, seed=4).rows(0) != steps[0]


def test_preference_batches_hold_chosen_then_rejected_rows_and_score_only_completions(tmp_path):
    _, pairs = write_records(tmp_path, 20)
    tok = chars_tokenizer()
    records = prepare_records(RecordsSettings(train=str(pairs), valid_fraction=0.25), "preference", tok, 32)
    assert (len(records.train), len(records.valid)) == (15, 5)
    assert sorted(records.train.lines.tolist() + records.valid.lines.tolist()) == list(range(20))
    again = prepare_records(RecordsSettings(train=str(pairs), valid_fraction=0.25), "preference", tok, 32)
    assert records.valid.lines.tolist() == again.valid.lines.tolist()  # the same held-out records every time
    batch = records.train.batch([0, 3], pad_id=0, context_length=32)
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    for i, (r, k) in enumerate([(0, "chosen"), (3, "chosen"), (0, "rejected"), (3, "rejected")]):
        line = rows[records.train.lines[r]]
        ids = batch["ids"][i].tolist()
        scored = [ids[j + 1] for j in range(len(ids) - 1) if batch["scored"][i, j]]
        assert tok.decode(scored) == line[k]
        assert tok.decode(ids[:len(tok.encode(line["prompt"]))]) == line["prompt"]  # no start token: no eot
    assert batch["index"].tolist() == records.train.lines[[0, 3]].tolist()


@pytest.mark.parametrize("text, message", [
    ('{"prompt": "say", "chosen": " a", "rejected": " a"}\n', "pairs.jsonl:1: chosen and rejected are the same text"),
    ('{"prompt": "say", "chosen": " a"}\n', "pairs.jsonl:1: missing field 'rejected'"),
    ('{"prompt": "say", "chosen": "", "rejected": " a"}\n', "pairs.jsonl:1: field 'chosen' is empty"),
    ('{"prompt": "' + "a" * 40 + '", "chosen": " a", "rejected": " b"}\n',
     "pairs.jsonl:1: prompt + chosen is 42 tokens (40 + 2), more than the 33 a sequence may have"),
])
def test_a_bad_record_is_one_line_naming_the_file_and_line(tmp_path, text, message):
    path = tmp_path / "pairs.jsonl"
    path.write_text(text)
    with pytest.raises(DataError) as err:
        prepare_records(RecordsSettings(train=str(path), valid=str(path)), "preference", chars_tokenizer(), 32)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_too_few_records_to_hold_some_out(tmp_path):
    _, pairs = write_records(tmp_path, 1)
    with pytest.raises(DataError, match="1 record, too few to hold out data.records.valid_fraction=0.1"):
        prepare_records(RecordsSettings(train=str(pairs)), "preference", chars_tokenizer(), 32)


# ------------------------------------------------------------------ the objectives on a batch
def tiny_model(vocab: int) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(family="llama3", n_layers=2, d_model=32, vocab_size=vocab, context_length=32,
                                   attention=dict(n_heads=2), parametrization=dict(init="normal")))


def test_sft_and_preference_scores_equal_each_sequence_scored_alone(tmp_path):
    sft_path, pairs_path = write_records(tmp_path, 12)
    tok = chars_tokenizer()
    model = tiny_model(tok.vocab_size)
    sft = prepare_records(RecordsSettings(train=str(sft_path), valid=str(sft_path)), "sft", tok, 32).train
    batch = sft.batch(range(6), pad_id=0, context_length=32)
    with torch.no_grad():
        alone = [completion_logprobs(model, [sft.prompts[r]], [sft.completions[r][0]], 0) for r in range(6)]
    total = -sum(float(s) for s, _ in alone)
    tokens = sum(int(n) for _, n in alone)
    objective = SFT()
    with torch.no_grad():
        loss = objective.terms(model, batch)["loss"]
        nll, count = objective.nll(model, batch)
    assert count == tokens and float(nll) == pytest.approx(total, rel=1e-5)
    assert float(loss) == pytest.approx(total / tokens, rel=1e-5)  # the mean over completion tokens

    pairs = prepare_records(RecordsSettings(train=str(pairs_path), valid=str(pairs_path)), "preference", tok, 32).train
    batch = pairs.batch(range(4), pad_id=0, context_length=32)
    got = Preference(preference=PreferenceSettings(loss=["simpo"])).pairs(model, batch)
    for r in range(4):
        chosen, _ = completion_logprobs(model, [pairs.prompts[r]], [pairs.completions[r][0]], 0)
        rejected, _ = completion_logprobs(model, [pairs.prompts[r]], [pairs.completions[r][1]], 0)
        assert float(got.chosen[r]) == pytest.approx(float(chosen), rel=1e-5, abs=1e-5)
        assert float(got.rejected[r]) == pytest.approx(float(rejected), rel=1e-5, abs=1e-5)


def test_record_objectives_refuse_a_bidirectional_model():
    cfg = ModelConfig(family="dhara", n_layers=1, d_model=16, vocab_size=10, context_length=8,
                      attention=dict(n_heads=2, causal=False))
    for name in ("sft", "preference"):
        with pytest.raises(ValueError, match="model.attention.causal=false"):
            OBJECTIVES.get(name)().check(cfg)


# ------------------------------------------------------------------ through slm-train
@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> dict:
    """pretrain (30 steps on the embedded corpus) -> SFT (2 epochs) -> DPO + 0.2 SFT (cached reference)."""
    tmp = tmp_path_factory.mktemp("chain")
    sft_path, pairs_path = write_records(tmp)
    out = slm_train(tmp, *TINY, "train.length.steps=30", group="pre")
    assert out.returncode == 0, out.stderr[-2000:]
    pre = run_dir(tmp, "pre")
    out = slm_train(tmp, *TINY, "train.objective=sft", f"+data.records.train={sft_path}", "train.length.epochs=2",
                    f"train.init_from='{pre}'", group="sft")
    assert out.returncode == 0, out.stderr[-2000:]
    sft = run_dir(tmp, "sft")
    return {"tmp": tmp, "pre": pre, "sft": sft, "pairs": pairs_path, "sft_path": sft_path}


def dpo_args(chain: dict, reference: str = "cached") -> list[str]:
    return [*TINY, "train.objective=preference", f"+data.records.train={chain['pairs']}", "train.length.epochs=3",
            "train.preference.loss=[dpo,sft]", "train.preference.weights=[1,0.2]", "train.lr=3e-3",
            f"train.preference.reference={reference}", f"train.init_from='{chain['sft']}'",
            "train.checkpoint.interval=5", "train.validation.interval=10"]


def test_the_chain_records_each_stage_and_its_parent(chain):
    sft = record(chain["sft"])
    assert sft["status"] == "completed" and sft["config"]["train"]["objective"] == "sft"
    assert sft["training"]["steps"] == 14  # 54 training records (6 held out), batch 8: 7 steps an epoch, 2 epochs
    assert sft["training"]["init_from"]["source_run"]["key"] == chain["pre"].name
    assert sft["data"]["records"]["train_records"] == 54 and sft["data"]["records_trained"] == 14 * 8
    out = slm_train(chain["tmp"], *dpo_args(chain), group="dpo")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "reference log-probs of the training pairs (54)" in out.stdout
    dpo = record(run_dir(chain["tmp"], "dpo"))
    assert dpo["status"] == "completed" and dpo["training"]["init_from"]["source_run"]["objective"] == "sft"
    assert 0 <= dpo["eval"]["val_reward_accuracy"] <= 1 and dpo["eval"]["val_chosen_logps"] < 0
    header = (run_dir(chain["tmp"], "dpo") / "logs" / "csv" / "metrics.csv").read_text().splitlines()[0]
    for name in ("train/dpo_loss", "train/sft_loss", "train/chosen_logps", "train/rejected_logps",
                 "train/reward_margin", "train/reward_accuracy", "val/reward_accuracy"):
        assert name in header
    # the same run with a frozen copy of the reference: the same numbers
    out = slm_train(chain["tmp"], *dpo_args(chain, "frozen"), group="frozen")
    assert out.returncode == 0, out.stderr[-2000:]
    frozen = record(run_dir(chain["tmp"], "frozen"))
    assert frozen["eval"]["val_nll"] == pytest.approx(dpo["eval"]["val_nll"], rel=1e-6)
    assert frozen["eval"]["val_reward_margin"] == pytest.approx(dpo["eval"]["val_reward_margin"], rel=1e-4, abs=1e-6)


def test_a_dpo_stage_resumes_exactly_after_sigkill(chain, tmp_path):
    args = dpo_args(chain)
    ref_dir, cut_dir = tmp_path / "ref", tmp_path / "cut"
    assert slm_train(ref_dir, *args).returncode == 0
    kill_at_step(cut_dir, args, 8)
    out = slm_train(cut_dir, *args)
    assert out.returncode == 0, out.stderr[-2000:]
    assert_same_run(run_dir(ref_dir), run_dir(cut_dir))


@pytest.mark.parametrize("extra, message", [
    (["train.objective=sft"], "data.records=None is invalid: train.objective=sft trains on records"),
    (["+data.records.train=PAIRS"], "data.records='PAIRS' is invalid: train.objective=causal_lm trains on token "
                                    "windows"),
    (["train.objective=preference", "+data.records.train=PAIRS", "train.length.steps=5"],
     "train.init_from=None is invalid: train.preference.loss=['dpo'] needs a reference model"),
    (["train.objective=preference", "+data.records.train=PAIRS"],
     "train.length.steps=None is invalid: a records run is measured in train.length.steps or train.length.epochs"),
    (["train.objective=sft", "+data.records.train=PAIRS", "train.length.steps=5"], "missing field 'completion'"),
    (["train.objective=preference", "+data.records.train=PAIRS", "train.length.steps=5",
      "train.preference.loss=[dpo,dpo]"], "train.preference.loss=['dpo', 'dpo'] is invalid: each loss at most once"),
    (["train.objective=sft", "+data.records.train=SFT", "train.length.steps=5", "train.init_from='PRE'",
      "model.norm.eps=1e-3"], "model.norm.eps=0.001 differs from train.init_from's model, which has 1e-06; a "
                              "post-training stage t"),
    (["model=dhara", "train.objective=sft", "model.objective=sft", "+data.records.train=PAIRS",
      "train.length.steps=5"], "model.attention.causal=false"),
])
def test_bad_settings_are_one_line_exit_2_and_write_nothing(chain, tmp_path, extra, message):
    subs = {"PAIRS": chain["pairs"], "SFT": chain["sft_path"], "PRE": chain["pre"]}
    for key, value in subs.items():
        extra = [e.replace(key, str(value)) for e in extra]
    message = message.replace("PAIRS", str(chain["pairs"]))
    base = TINY[1:] if any(e.startswith("model=") for e in extra) else TINY
    out = slm_train(tmp_path, *base, *extra)
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("slm-train: error: ") and message in last, last
    assert "Traceback" not in out.stderr
    assert not list(tmp_path.rglob("result.json"))
