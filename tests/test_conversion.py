"""AR -> masked diffusion conversion (Dhara): train.init_from (weights only, every shape checked, provenance in
the record) and the attention-block curriculum (warm-up, stable, decay; a pure function of the step; what the
model's forward gets), through slm-train on tiny models: a converted run completes, and resumes exactly."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from slm.model import ModelConfig, Transformer
from slm.model.weights import load_config, load_model, save_model
from slm.objectives import OBJECTIVES
from slm.settings import nested
from slm.training.config import TrainConfig, TrainConfigError
from slm.training.curriculum import BlockCurriculum
from slm.training.init_from import InitFromError, check_shapes, find_source, load_weights
from tests.test_train_cli import _steps, assert_same_run, kill_at_step, record, slm_train

V = 21  # 20 symbols + the mask token
TINY = {"n_layers": 2, "d_model": 32, "attention.n_heads": 4, "attention.n_kv_heads": 2, "vocab_size": V,
        "context_length": 16, "canon": dict(set="AC"), "mlp.kind": "swiglu", "norm.kind": "rmsnorm",
        "position.kind": "rope", "parametrization.init": "normal"}


# ---------------------------------------------------------------- the curriculum
def test_blocks_warm_up_by_doubling_then_stay_full_then_decay():
    c = BlockCurriculum(start=1, warmup_fraction=0.5, decay_fraction=0.2, decay_block=16)
    blocks = [c.block(step, 40, 64) for step in range(40)]
    # 20 warm-up steps over 6 stages (1, 2, 4, 8, 16, 32) starting at 20 * k // 6; then the context; then 16
    assert blocks == [1] * 4 + [2] * 3 + [4] * 3 + [8] * 4 + [16] * 3 + [32] * 3 + [64] * 12 + [16] * 8
    assert c.schedule(40, 64) == [(0, 1), (4, 2), (7, 4), (10, 8), (14, 16), (17, 32), (20, 64), (32, 16)]


def test_growth_start_and_no_decay():
    c = BlockCurriculum(start=4, growth=4, warmup_fraction=0.1)
    assert c.warmup_blocks(1024) == [4, 16, 64, 256]
    blocks = [c.block(s, 1000, 1024) for s in range(1000)]
    assert blocks[:100] == [4] * 25 + [16] * 25 + [64] * 25 + [256] * 25 and set(blocks[100:]) == {1024}
    assert [BlockCurriculum(warmup_fraction=0).block(s, 10, 8) for s in range(10)] == [8] * 10  # plain MDLM


BAD_CURRICULA = {
    "fraction_only": (dict(decay_fraction=0.1), "decay_block=None with decay_fraction=0.1 is invalid: set both"),
    "block_only": (dict(decay_block=32), "decay_block=32 with decay_fraction=0.0 is invalid: set both"),
    "start": (dict(start=0), "train.block_curriculum.start=0 is invalid: must be an integer >= 1"),
    "growth": (dict(growth=1), "train.block_curriculum.growth=1 is invalid"),
    "too_long": (dict(warmup_fraction=0.8, decay_fraction=0.3, decay_block=8),
                 "warmup_fraction 0.8 + decay_fraction 0.3"),
    "typo": (dict(strat=1), "train.block_curriculum has unknown key 'strat' (did you mean start?): choose from start, growth"),
}


@pytest.mark.parametrize("node, message", BAD_CURRICULA.values(), ids=BAD_CURRICULA)
def test_bad_curricula_are_refused(node, message):
    with pytest.raises(TrainConfigError, match=re.escape(message)):
        TrainConfig(objective="mdlm", block_curriculum=node)


def test_the_curriculum_is_for_masked_diffusion_only():
    with pytest.raises(TrainConfigError, match="train.block_curriculum is set with train.objective=causal_lm"):
        TrainConfig(block_curriculum={"start": 1})
    assert TrainConfig(objective="mdlm", block_curriculum={"start": 2}).to_dict()["block_curriculum"]["start"] == 2


class Recorder(torch.nn.Module):
    """The model, keeping the logits of its last forward."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.cfg = model, model.cfg

    def forward(self, idx, **kwargs):
        out = self.inner(idx, **kwargs)
        self.logits = (out[0] if isinstance(out, tuple) else out).detach()
        return out


@pytest.mark.parametrize("method", ["terms", "nll"])
def test_the_objective_runs_the_model_with_the_block(method):
    """Block 1 is causal: the logits at the positions before k do not move when the tokens from k on change;
    with full attention (no block) they do. Same seed, so the same times and masks."""
    model = Recorder(Transformer(ModelConfig(**nested({**TINY, "attention.causal": False,
                                                       "embedding.mask_token_id": V - 1}))))
    a = torch.randint(0, V - 1, (4, 17), generator=torch.Generator().manual_seed(0))
    b = a.clone()
    b[:, 9:] = (a[:, 9:] + 1) % (V - 1)
    mdlm = OBJECTIVES.get("mdlm")()
    run = getattr(mdlm, method)
    logits = {}
    for block in (1, None):
        for name, tokens in (("a", a), ("b", b)):
            run(model, tokens, seed=5, attention_block=block)
            logits[block, name] = model.logits
    assert torch.equal(logits[1, "a"][:, :9], logits[1, "b"][:, :9])
    assert not torch.allclose(logits[None, "a"][:, :9], logits[None, "b"][:, :9])


# ---------------------------------------------------------------- init_from
def _source(tmp_path: Path, **fields) -> Path:
    torch.manual_seed(1)
    path = tmp_path / "source" / "model"
    save_model(Transformer(ModelConfig(**nested({**TINY, **fields}))), path)
    return path.parent


def test_init_from_loads_exactly_the_source_weights(tmp_path):
    run_dir = _source(tmp_path)  # a causal model (the AR run), found through its run directory
    torch.manual_seed(2)
    target = Transformer(ModelConfig(**nested({**TINY, "attention.causal": False, "embedding.mask_token_id": V - 1,
                                               "attention.block": 4})))
    source = find_source(run_dir)
    assert source.model_dir == run_dir / "model" and source.run_dir == run_dir
    load_weights(target, source, V - 1)
    want = load_model(run_dir / "model").state_dict()
    got = target.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert target.lm_head.weight is target.tok_emb.weight  # still tied
    assert find_source(run_dir / "model").run_dir is None  # a checkpoint directory itself


MISMATCHES = {
    "vocab": (dict(vocab_size=V + 1), f"tensor lm_head.weight is [{V}, 32] in the source and [{V + 1}, 32] in this"),
    "width": (dict(d_model=48), "tensor blocks.0.attn.proj.weight is [32, 32] in the source and [48, 48] in this"),
    "canon": (dict(canon=dict(set="A")), ("the source has tensor blocks.0.canon_c.conv.weight [32, 1, 4], which this "
                                    "model lacks (2 such tensors)")),
    "depth": (dict(n_layers=3), "this model's tensor blocks.2.attn_norm.weight [32] is not in the source"),
    "untied": ({"embedding.tie": False}, "this model's tensor tok_emb.weight"),
}


@pytest.mark.parametrize("target, message", MISMATCHES.values(), ids=MISMATCHES)
def test_a_shape_mismatch_names_the_tensor_and_both_shapes(tmp_path, target, message):
    source = find_source(_source(tmp_path))
    with torch.device("meta"):
        model = Transformer(ModelConfig(**nested({**TINY, **target})))
    with pytest.raises(InitFromError, match=re.escape(message)):
        check_shapes(source, model)


def test_untied_source_into_a_tied_model_is_refused(tmp_path):
    source = find_source(_source(tmp_path, embedding=dict(tie=False)))
    with pytest.raises(InitFromError, match="the source has separate tok_emb.weight and lm_head.weight"):
        check_shapes(source, Transformer(ModelConfig(**nested(TINY))))


# ---------------------------------------------------------------- the study's two sweep files
def test_stage_two_starts_from_stage_one_run_directory(monkeypatch):
    """sweeps/dhara_conversion.yaml's init_from names the run directory stage 1 (dhara_conversion_ar.yaml)
    writes: the same run group and stage 1's job key; its curriculum ends in LLaDA 2.0's block of 32."""
    from hydra import compose, initialize_config_dir

    from slm.cli.config import CONF_DIR, register_resolvers
    from slm.runs.keys import job_key

    register_resolvers()
    monkeypatch.setenv("SLM_RUNS", "/study/runs")
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        ar, cv = (compose("config", overrides=[f"sweep={name}"], return_hydra_config=True)
                  for name in ("dhara_conversion_ar", "dhara_conversion"))
    (point,) = OmegaConf.to_container(ar.hydra.sweeper.points)
    assert point == ["model=llama3_canon"] and ar.train.objective == "causal_lm" and ar.train.length.tokens == 1e9
    train = TrainConfig.from_node(OmegaConf.to_container(cv.train, resolve=True))
    assert train.init_from == f"/study/runs/{ar.run_group}/{job_key(','.join(point))}"
    assert OmegaConf.to_container(cv.hydra.sweeper.points) == [["model=dhara"]] and cv.run_group == ar.run_group
    assert train.objective == "mdlm" and train.length.tokens == 1e8 and ar.tokenizer.pad_vocab_multiple == 64
    blocks = train.block_curriculum.schedule(train.max_steps(1024), 1024)
    assert blocks[0] == (0, 1) and blocks[-2][1] == 1024 and blocks[-1][1] == 32


# ---------------------------------------------------------------- through slm-train
TINY_RUN = ["model.n_layers=2", "model.d_model=32", "model.attention.head_dim=16", "model.attention.n_kv_heads=2",
            "model.context_length=32", "eval=none", "train.logging.progress_bar=false", "train.validation.batches=2",
            "train.logging.interval=5", "train.batch_size=8"]
CURRICULUM = ["+train.block_curriculum.warmup_fraction=0.25", "+train.block_curriculum.decay_fraction=0.2",
              "+train.block_curriculum.decay_block=8"]


def _one_line_exit_2(code: int, stderr: str, message: str, runs: Path) -> None:
    assert code == 2, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("slm-train: error: train.init_from=") and message in last, last
    assert "Traceback" not in stderr
    assert not runs.exists() or not list(runs.rglob("result.json"))


def test_bad_init_from_is_one_line_exit_2_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from slm.cli.config import compose_config
    from slm.cli.train import single_run
    from slm.model import config_from_spec
    from tests.conftest import compose_model_node

    # a char-level source without the mask token: the diffusion model's vocabulary has one row more
    char = config_from_spec(compose_model_node("model=llama3_canon", *TINY_RUN[:5], "model.vocab_size=65"))
    save_model(Transformer(char), tmp_path / "ckpt")
    args = [*TINY_RUN, "model=dhara", "train.objective=mdlm", "train.length.steps=5"]
    out = slm_train(tmp_path, *args, f"train.init_from={tmp_path / 'ckpt'}")
    _one_line_exit_2(out.returncode, out.stderr, "tensor lm_head.weight is [65, 32] in the source and [66, 32] in "
                     "this model: this run's mask token adds a row to the vocabulary; train the source with "
                     "tokenizer.mask=true", tmp_path / "runs")
    # the same path in this process (no second interpreter start): a missing directory
    monkeypatch.setenv("SLM_CACHE", str(tmp_path.parent / "slm-cache"))
    cfg = compose_config([*args, f"train.init_from={tmp_path / 'nowhere'}"])
    with pytest.raises(SystemExit) as exit_:
        single_run(cfg, str(tmp_path / "runs" / "t" / "missing"))
    _one_line_exit_2(exit_.value.code, capsys.readouterr().err, "nowhere: no such run or checkpoint directory",
                     tmp_path / "runs")


@pytest.fixture(scope="module")
def ar_run(tmp_path_factory) -> Path:
    """A tiny llama3_canon AR run on the embedded corpus, its vocabulary with the mask token's row."""
    tmp = tmp_path_factory.mktemp("ar")
    out = slm_train(tmp, "model=llama3_canon", *TINY_RUN, "tokenizer.mask=true", "train.length.steps=20", group="ar")
    assert out.returncode == 0, out.stderr[-2000:]
    (path,) = (tmp / "runs" / "ar").iterdir()
    return path


def _convert_args(ar: Path) -> list[str]:
    return ["model=dhara", *TINY_RUN, "train.objective=mdlm", f"train.init_from='{ar}'", *CURRICULUM,
            "train.length.steps=40", "train.checkpoint.interval=10", "train.validation.interval=20", "train.lr=3e-3"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory, ar_run) -> Path:
    """The AR run converted to masked diffusion with the block curriculum, uninterrupted."""
    tmp = tmp_path_factory.mktemp("converted")
    out = slm_train(tmp, *_convert_args(ar_run))
    assert out.returncode == 0, out.stderr[-2000:]
    (path,) = (tmp / "runs" / "t").iterdir()
    return path


def _first_loss_from(ar: Path, converted: Path, block: int | None) -> float:
    """The MDLM loss of the converted run's first batch and noise, computed here from the AR run's weights."""
    from slm.cli.config import compose_config
    from slm.data import SLMDataModule, prepare
    from slm.objectives import tokenizer_node_for
    from slm.training.module import step_seed

    cfg = OmegaConf.to_container(compose_config(["model=dhara", *TINY_RUN[:4], "train.objective=mdlm"]), resolve=True)
    prepared = prepare(cfg["data"], tokenizer_node_for("mdlm", cfg["tokenizer"]))
    batch = torch.from_numpy(SLMDataModule(prepared, 8, 32, 0, 2).sampler.batch(0))
    model = Transformer(load_config(converted / "model"))
    load_weights(model, find_source(ar), model.cfg.embedding.mask_token_id)
    with torch.no_grad():
        return OBJECTIVES.get("mdlm")().terms(model, batch, seed=step_seed(0, 0), attention_block=block)["loss"].item()


def test_a_converted_run_starts_from_the_source_follows_the_curriculum_and_records_both(ar_run, converted,
                                                                                         monkeypatch):
    r = record(converted)
    assert r["status"] == "completed" and r["eval"]["val_nll_kind"] == "nelbo"
    init = r["training"]["init_from"]
    assert init["model_dir"] == str(ar_run / "model") and init["run_dir"] == str(ar_run)
    assert init["source_run"]["objective"] == "causal_lm" and init["source_run"]["steps"] == 20
    assert init["source_run"]["status"] == "completed" and len(init["weights_sha256"]) == 64
    assert init["source_model"] == {"family": "llama3_canon", "vocab_size": 66,
                                    "attention": {"causal": True, "block": None}, "embedding": {"mask_token_id": 65}}
    # 10 warm-up steps over blocks 1, 2, 4, 8, 16; the full context (32); the last 8 steps at the decay block 8
    assert r["training"]["attention_blocks"] == [[0, 1], [2, 2], [4, 4], [6, 8], [8, 16], [10, 32], [32, 8]]
    log = [json.loads(line) for line in (converted / "train_log.jsonl").read_text().splitlines()]
    assert [row["attention_block"] for row in log] == [1, 1, 2, 2, 4, 4, 8, 8, 16, 16] + [32] * 22 + [8] * 8
    assert r["eval"]["val_attention_block"] == 8
    header = (converted / "logs" / "csv" / "metrics.csv").read_text().splitlines()[0]
    assert "train/attention_block" in header and "val/attention_block" in header
    # the saved model decodes block by block; the record's model section says the same
    assert load_config(converted / "model").attention.block == 8 and r["model"]["attention"]["block"] == 8
    # the first step trained the AR weights with block 1: its loss is the one computed here from them (and
    # not the full-attention one)
    monkeypatch.setenv("SLM_CACHE", str(converted.parents[3] / "slm-cache"))  # where slm_train cached the data
    first = _first_loss_from(ar_run, converted, block=1)
    assert log[0]["loss"] == pytest.approx(first, rel=1e-5)
    assert _first_loss_from(ar_run, converted, block=None) != pytest.approx(first, rel=1e-3)


def test_a_resumed_run_does_not_apply_init_from_again(tmp_path, monkeypatch):
    """With its own checkpoint a run resumes from it: the source is not looked at (it may be gone by then)."""
    from slm.cli.config import compose_config
    from slm.runs.layout import CHECKPOINT
    from slm.runs.preflight import prepare

    monkeypatch.setenv("SLM_CACHE", str(tmp_path.parent / "slm-cache"))
    cfg = OmegaConf.to_container(compose_config(["model=dhara", *TINY_RUN, "train.objective=mdlm",
                                                 f"train.init_from={tmp_path / 'gone'}"]), resolve=True)
    with pytest.raises(FileNotFoundError, match="gone: no such run or checkpoint directory"):
        prepare(cfg, tmp_path / "run")
    (tmp_path / "run" / CHECKPOINT).parent.mkdir(parents=True)
    (tmp_path / "run" / CHECKPOINT).touch()
    assert prepare(cfg, tmp_path / "run").init is None  # no init source: the checkpoint has the weights


@pytest.mark.slow
def test_a_converted_run_resumes_exactly_after_sigkill(tmp_path, ar_run, converted):
    """Killed mid-curriculum and started again, it resumes from its own checkpoint (init_from is not applied
    again) to the weights, loss curve, blocks and bound of the uninterrupted run."""
    args = _convert_args(ar_run)
    cut = kill_at_step(tmp_path, args, 15)
    assert record(cut)["status"] == "running" and 15 <= _steps(cut) < 40
    out = slm_train(tmp_path, *args)
    assert out.returncode == 0, out.stderr[-2000:]
    r, rc = record(converted), record(cut)
    assert rc["status"] == "completed" and rc["training"]["resumed_from"] == "checkpoints/last.ckpt"
    assert rc["training"]["init_from"] == r["training"]["init_from"]
    assert_same_run(converted, cut)
