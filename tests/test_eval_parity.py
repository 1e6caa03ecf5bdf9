"""Parity with lm-eval's own `hf` model: tiny GPT-2 and LLaMA models built in transformers, saved with a
tokenizer, converted with `slm-import-hf`, must get the same per-request log-likelihoods (within 1e-4)
and the same offline-task scores from our `slm` model as from lm-eval's HFLM on the transformers weights.

The tokenizer is a small BPE trained here with the `tokenizers` library on the Tiny Shakespeare
training split, saved as a PreTrainedTokenizerFast (what HFLM loads) and given to the slm checkpoint
through the `hf` kind of slm.data's tokenizers (what `slm-train` would have saved)."""

from __future__ import annotations

from importlib import resources

import pytest
import torch
import transformers as tf
from lm_eval import simple_evaluate
from lm_eval.api.instance import Instance
from tokenizers import Tokenizer, decoders, models, trainers

from slm.cli.import_hf import main as import_hf
from slm.data.tokenizers import HFTokenizer
from slm.eval.lm import SLMLM
from slm.eval.offline_tasks import mc_documents, ppl_documents
from slm.eval.run import task_manager

pytest.importorskip("accelerate", reason="lm-eval's hf model needs accelerate (lm-eval[hf])")
from lm_eval.models.huggingface import HFLM  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

V, CTX, TOL = 128, 64, 1e-4
EOT = "<|endoftext|>"

HF_MODELS = {
    "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(
        vocab_size=V, n_positions=CTX, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)),
    "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=CTX, bos_token_id=None, eos_token_id=0, pad_token_id=None,
        tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 500.0})),
}



@pytest.fixture(scope="module")
def tokenizer():
    """A char-level BPE of 120 ids (<|endoftext|> = 0, <unk> = 1) trained on Shakespeare; no BOS added."""
    text = resources.files("slm.data").joinpath("corpora/tiny_shakespeare/train.txt").read_text()[:200_000]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=[EOT, "<unk>"], show_progress=False)
    tok.train_from_iterator(text.splitlines(keepends=True), trainer)
    return tf.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOT, unk_token="<unk>")


@pytest.fixture(scope="module", params=list(HF_MODELS))
def pair(request, tokenizer, tmp_path_factory):
    """(lm-eval's HFLM on the transformers dir, our SLMLM on the converted checkpoint)."""
    root = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    hf_model = HF_MODELS[request.param]()
    with torch.no_grad():  # norm weights and biases away from 1 / 0
        for p in hf_model.parameters():
            if p.ndim == 1:
                p.normal_(1.0 if p.abs().max() == 1 else 0.0, 0.3)
    hf_model.save_pretrained(root / "hf")
    tokenizer.save_pretrained(root / "hf")
    import_hf([str(root / "hf"), str(root / "slm")])
    HFTokenizer(root / "hf", eot=True).save(root / "slm")
    hf = HFLM(pretrained=str(root / "hf"), device="cpu", batch_size=8, dtype="float32")
    ours = SLMLM(pretrained=str(root / "slm"), device="cpu", batch_size=8)
    assert (ours.max_length, ours.prefix_token_id) == (hf.max_length, hf.prefix_token_id) == (CTX, 0)
    return hf, ours


def test_same_per_request_loglikelihoods(pair):
    hf, ours = pair
    docs = mc_documents()[:12]
    args = [(d["context"], c) for d in docs for c in d["choices"]]  # shared contexts (prefix reuse)
    args += [(ppl_documents()[1]["text"][:400], " and so farewell."), ("", "Now is the winter")]  # truncated; empty
    requests = [Instance("loglikelihood", {}, a, i) for i, a in enumerate(args)]
    theirs, mine = hf.loglikelihood(requests, disable_tqdm=True), ours.loglikelihood(requests, disable_tqdm=True)
    assert max(abs(a - b) for (a, _), (b, _) in zip(theirs, mine)) < TOL
    assert [g for _, g in theirs] == [g for _, g in mine]

    texts = [d["text"] for d in ppl_documents()[:3]] + ["O"]  # several windows each; one token
    rolling = [Instance("loglikelihood_rolling", {}, (t,), 0) for t in texts]
    theirs = hf.loglikelihood_rolling(rolling, disable_tqdm=True)
    mine = ours.loglikelihood_rolling(rolling, disable_tqdm=True)
    for a, b, text in zip(theirs, mine, texts):  # sums over hundreds of tokens: within 1e-4 per token
        assert abs(a - b) < TOL * max(1, len(ours.tok_encode(text)) / 10)


def test_same_offline_task_scores(pair):
    hf, ours = pair
    tasks = ["slm_shakespeare_bpb", "slm_shakespeare_mc"]
    scores = []
    for lm in (hf, ours):
        results = simple_evaluate(model=lm, tasks=tasks, task_manager=task_manager(tasks, []), limit=10,
                                  log_samples=False)["results"]
        scores.append(results)
    theirs, mine = scores
    for metric in ("acc,none", "acc_norm,none"):
        assert theirs["slm_shakespeare_mc"][metric] == mine["slm_shakespeare_mc"][metric]
    for metric in ("bits_per_byte,none", "byte_perplexity,none", "word_perplexity,none"):
        assert mine["slm_shakespeare_bpb"][metric] == pytest.approx(theirs["slm_shakespeare_bpb"][metric], rel=1e-5)
