"""The verbs people expect: slm-generate, slm-export-hf, slm-status without arguments, slm-train --help and what
slm-train does with no arguments. Each as a user runs it (in-process through its entry function, the console
scripts once each), with bad input as one line and exit 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from slm.cli.config import CONF_DIR
from slm.data.tokenizers import CharTokenizer, load_tokenizer
from slm.model import ModelConfig, Transformer
from slm.model.diffusion import diffusion_generate
from slm.model.generate import generate
from slm.model.networks import build_model
from slm.model.weights import load_model, save_model
from slm.settings import nested
from tests.shipped import shipped_sweeps

ROOT = Path(__file__).resolve().parents[1]
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
SYMBOLS = sorted(set(TEXT))


def _run_dir(path: Path, tok=None, **cfg) -> Path:
    """A run directory as slm-train leaves it (model/ with weights, config.json and the tokenizer), random init."""
    tok = tok or CharTokenizer(SYMBOLS, unk=False, eot=False)
    fields = {"n_layers": 2, "d_model": 32, "attention.n_heads": 4, "attention.n_kv_heads": 2,
              "vocab_size": tok.vocab_size, "context_length": 64}
    torch.manual_seed(0)
    model = build_model(ModelConfig(**nested({**fields, **cfg})))
    with torch.no_grad():  # random weights far from init, so greedy text varies and logits are not tiny
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    save_model(model, path / "model")
    tok.save(path / "model")
    return path


def _fails(fn, argv, capsys, *needles: str, prog: str) -> str:
    """fn(argv) exits 2 with one line on stderr starting `<prog>: error:` and holding every needle."""
    with pytest.raises(SystemExit) as exit_:
        fn(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith(f"{prog}: error:"), err
    for needle in needles:
        assert needle in err, err
    return err


def _script(name: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / name), *args], capture_output=True, text=True,
                          timeout=180, env={**os.environ, **(env or {})})


# ================================================================================================ slm-generate
def test_generate_autoregressive_is_the_decoder_and_seeded(tmp_path, capsys):
    from slm.cli.generate import run

    run_dir = _run_dir(tmp_path / "run")
    model, tok = load_model(run_dir / "model"), load_tokenizer(run_dir / "model")
    texts = run([str(run_dir), "All:", "--temperature", "0", "-n", "30"])
    expected = "All:" + tok.decode(generate(model, [tok.encode("All:")], 30)[0])
    assert texts == [expected] and capsys.readouterr().out == expected + "\n"
    assert len(expected) == len("All:") + 30  # the char tokenizer has no end-of-text token to stop at

    sampling = ["All:", "-n", "20", "--seed", "3", "--top-k", "5", "--top-p", "0.9", "--num-samples", "3"]
    sampled = run([str(run_dir), *sampling])
    out = capsys.readouterr().out
    assert out.count("=== sample ") == 3 and len(set(sampled)) > 1  # three different draws in one batch
    assert run([str(run_dir), *sampling]) == sampled
    assert run([str(run_dir), "All:", "--seed", "3", "-n", "5", "--new-only"])[0] != "All:"  # only the new text
    # an empty prompt starts from a newline when the tokenizer has no end-of-text token
    (empty,) = run([str(run_dir), "", "-n", "10", "--seed", "0"])
    assert len(empty) == 10
    # the prompt fills the context: at most context - prompt + 1 new tokens, and a note says so
    long = TEXT[:60]
    (text,) = run([str(run_dir), long, "-n", "50", "-t", "0"])
    assert len(text) == 64 + 1 and "at most 5 new tokens" in capsys.readouterr().err


def test_generate_masked_diffusion_titans_and_window_models(tmp_path, capsys):
    from slm.cli.generate import run

    # masked diffusion: the mask token is the tokenizer's last id; the sampler's output, never a mask
    tok = CharTokenizer(SYMBOLS, unk=False, eot=False).reserve_mask()
    run_dir = _run_dir(tmp_path / "dllm", tok=tok, attention=dict(causal=False),
                       embedding=dict(mask_token_id=tok.mask_id))
    model = load_model(run_dir / "model")
    (text,) = run([str(run_dir), "All:", "-t", "0", "-n", "16", "--steps", "8", "--block-length", "8"])
    ids = diffusion_generate(model, [tok.encode("All:")], 16, block_length=8, steps=8)[0]
    assert text == "All:" + tok.decode(ids) and "<mask>" not in text and len(text) == 4 + 16
    _fails(run, [str(run_dir), "All:", "--top-k", "3"], capsys, "--top-k and --top-p apply to autoregressive",
           prog="slm-generate")

    # Titans' memory as context: the eager KV cache
    titans = _run_dir(tmp_path / "titans", memory=dict(layers=[0], segment=8, heads=2, hidden=8,
                      persistent_tokens=2), context_length=32)
    model = load_model(titans / "model")
    (text,) = run([str(titans), "All:", "-t", "0", "-n", "12"])
    tok = load_tokenizer(titans / "model")
    assert text == "All:" + tok.decode(generate(model, [tok.encode("All:")], 12)[0])
    _fails(run, [str(titans), "All:", "--steps", "4"], capsys, "--steps: options of masked diffusion sampling",
           "an autoregressive model", prog="slm-generate")

    # arXiv 2512.20877's linear window model: the last context_length tokens, sliding
    window = _run_dir(tmp_path / "linear", kind="linear", context_length=8, embedding=dict(tie=False))
    (text,) = run([str(window), "Before we", "-t", "0", "-n", "6"])
    assert text.startswith("Before we") and len(text) == len("Before we") + 6
    _fails(run, [str(window), "All", "-n", "3"], capsys, "predicts from exactly 8 tokens; the prompt has 3",
           prog="slm-generate")


def test_generate_bad_input_is_one_line(tmp_path, capsys):
    from slm.cli.generate import run

    run_dir = _run_dir(tmp_path / "run")
    cases = [
        ([str(tmp_path / "nowhere"), "x"], ["nowhere: no such run or checkpoint directory"]),
        ([str(run_dir), "café"], ["1 character outside the char vocabulary", ": 'é'; leave it out, or pass --unknown drop"]),
        ([str(run_dir), "x", "--temperature", "-1"], ["--temperature", "must be >= 0"]),
        ([str(run_dir), "x", "--temperature", "nan"], ["not a finite number"]),
        ([str(run_dir), "x", "-n", "abc"], ["invalid int value: 'abc'"]),
        ([str(run_dir), "x", "--top-p", "1.5"], ["must be in (0, 1]"]),
        ([str(run_dir), "x", "--device", "cuda:99"], ["--device cuda:99"]),
        ([str(run_dir), TEXT[:70]], ["the prompt is 70 tokens and the model's context 64"]),
    ]
    for argv, needles in cases:
        _fails(run, argv, capsys, *needles, prog="slm-generate")
    # an empty prompt, and a tokenizer with neither an end-of-text nor a newline token
    words = _run_dir(tmp_path / "nonl", tok=CharTokenizer([c for c in SYMBOLS if c != "\n"], unk=True, eot=False))
    _fails(run, [str(words), ""], capsys, "gives no tokens", "give a prompt", prog="slm-generate")
    # a damaged checkpoint: the loader's one line
    (run_dir / "model" / "config.json").write_text("{not json")
    _fails(run, [str(run_dir), "x"], capsys, "config.json: not valid JSON", prog="slm-generate")


def test_console_scripts_are_installed():
    """pyproject's slm-generate and slm-export-hf reach these modules (generation itself is tested in-process
    above: the console scripts' --help and argument errors come before torch is imported, so this is quick)."""
    for name, needle in (("slm-generate", "masked diffusion"), ("slm-export-hf", "from_pretrained")):
        out = _script(name, "--help")
        assert out.returncode == 0 and out.stdout.startswith(f"usage: {name}") and needle in out.stdout, out.stderr
    bad = _script("slm-generate", "run", "x", "--max-new-tokens", "0")
    assert bad.returncode == 2 and bad.stderr == ("slm-generate: error: argument --max-new-tokens/-n: 0: must be >= 1 "
                                                  "(see slm-generate --help)\n")


# =============================================================================================== slm-export-hf
@pytest.mark.parametrize("family", [
    dict(),                                                        # LLaMA style (debug, llama3)
    {"position.kind": "learned", "norm.kind": "layernorm", "mlp.kind": "gelu", "block.bias": True,
     "attention.n_kv_heads": None, "parametrization.init": "gpt2"},  # GPT-2
])
def test_export_hf_logits_and_tokenizer_equal_slms(tmp_path, capsys, family):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slm.cli.export_hf import run

    tok = CharTokenizer(SYMBOLS, unk=True, eot=True)
    run_dir = _run_dir(tmp_path / "run", tok=tok, **family)
    out = run([str(run_dir), str(tmp_path / "hf")])
    line = capsys.readouterr().out
    assert line.startswith(f"{out}: ") and "logits checked" in line and "tokenizer char (tokenizer.json)" in line
    hf_model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    model = load_model(run_dir / "model")
    idx = torch.randint(0, tok.vocab_size, (2, 40))
    with torch.no_grad():
        assert (hf_model(idx, use_cache=False).logits - model(idx)).abs().max().item() < 1e-4
    hf_tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    text = "Speak, hear me!\n\nzebra"  # z, b and ! are not in the vocabulary: <unk>
    assert hf_tok(text, add_special_tokens=False)["input_ids"] == tok.encode(text)
    assert hf_tok.eos_token_id == tok.eot_id == hf_model.config.eos_token_id
    assert load_tokenizer(out).encode(text) == tok.encode(text)  # slm's own file is there too

    # a non-empty out dir is refused, and left untouched; --force writes into it
    before = (out / "model.safetensors").read_bytes()
    _fails(run, [str(run_dir), str(out)], capsys, "exists and is not empty (use --force", prog="slm-export-hf")
    assert (out / "model.safetensors").read_bytes() == before
    run([str(run_dir), str(out), "--force", "--dtype", "bfloat16"])
    assert "in bfloat16" in capsys.readouterr().out


def test_export_hf_refuses_what_transformers_lacks(tmp_path, capsys):
    from slm.cli.export_hf import EXPORTABLE, run
    from slm.interop.hf import to_hf
    from slm.model import config_from_spec
    from tests.conftest import compose_model_node

    canon = _run_dir(tmp_path / "canon", canon=dict(set="AC"))
    _fails(run, [str(canon), str(tmp_path / "out")], capsys, "cannot be exported to transformers",
           "Canon layers", "gpt2 (GPT2LMHeadModel)", prog="slm-export-hf")
    window = _run_dir(tmp_path / "linear", kind="linear", context_length=8, embedding=dict(tie=False))
    _fails(run, [str(window), str(tmp_path / "out")], capsys, "window model", prog="slm-export-hf")
    _fails(run, [str(tmp_path / "nowhere"), str(tmp_path / "out")], capsys, "no such run", prog="slm-export-hf")
    assert not (tmp_path / "out").exists()  # nothing written
    # every preset the message offers does export (at a tiny size of its own shape)
    tiny = {"gpt2": ["model.n_layers=2", "model.d_model=64"], "design_40m": ["model.n_layers=2", "model.d_model=80"],
            "mobilellm": ["model.n_layers=2", "model.d_model=96", "model.attention.head_dim=32"],
            "lfm2": ["model.n_layers=3", "model.d_model=64", "model.attention.head_dim=16"],
            "moe": ["model.n_layers=2", "model.d_model=64", "model.attention.head_dim=16", "model.moe.n_experts=4",
                    "model.moe.expert_d_ff=32"]}
    offered = ("gpt2", "llama3", "debug", "design_40m", "mobilellm", "lfm2", "moe")
    assert all(re.search(rf"\b{name}\b", EXPORTABLE) for name in offered)
    for preset in offered:
        over = tiny.get(preset, ["model.n_layers=2", "model.d_model=64", "model.attention.head_dim=16"])
        cfg = config_from_spec(compose_model_node(f"model={preset}", "model.vocab_size=64",
                                                  "model.context_length=64", *over))
        to_hf(Transformer(cfg))  # raises if it cannot


@pytest.mark.slow
def test_export_hf_gpt2_tokenizer_encodes_as_slm(tmp_path, capsys):
    from transformers import AutoTokenizer

    from slm.cli.export_hf import run
    from slm.data.tokenizers import GPT2Tokenizer

    tok = GPT2Tokenizer()
    run_dir = _run_dir(tmp_path / "run", tok=tok, vocab_size=50304, n_layers=1, d_model=16,
                       attention=dict(n_heads=2, n_kv_heads=1))
    out = run([str(run_dir), str(tmp_path / "hf"), "--no-check"])
    hf_tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    text = (ROOT / "tests" / "data" / "wikitext2_valid_excerpt.txt").read_text()[:20000] + " héllo 🤖\n\n  x"
    assert hf_tok(text, add_special_tokens=False)["input_ids"] == tok.encode(text)
    assert hf_tok.eos_token_id == 50256


# ================================================================================== slm-status, one vocabulary
def test_status_lists_run_groups_and_takes_a_group_name(tmp_path, capsys, monkeypatch):
    from slm.cli.status import run
    from slm.runs import record
    from slm.runs import states as status
    from tests.test_sweep_status import _sweep

    assert status.ORDER == tuple(status.STATES) and set(record.STATUSES) <= set(status.STATES)
    assert set(status.FINISHED) == set(record.FINAL)
    _sweep(tmp_path)  # runs/demo: one job in each state but running
    (tmp_path / "runs" / "empty").mkdir()
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "runs"))
    run([])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{tmp_path / 'runs'}: 2 run groups"
    assert re.match(r"  demo\s+6 jobs: 1 failed, 1 diverged, 2 stopped, 1 pending, 1 completed$", lines[1]), lines
    assert re.match(r"  empty\s+0 jobs$", lines[2]) and lines[3].startswith("details: slm-status <run group>")
    words = {w for line in lines[1:3] if ": " in line for w in re.findall(r"\d+ (\w+)", line.split(": ", 1)[1])}
    assert words <= set(status.STATES)

    monkeypatch.chdir(tmp_path)  # `demo` is not a path from here: it is the run group runs/demo
    run(["demo"])
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'runs' / 'demo'}: 6 jobs")
    _fails(run, ["demi"], capsys, "demi: no such run group or directory, here or under",
           f"did you mean {tmp_path / 'runs' / 'demo'}?", prog="slm-status")
    _fails(run, ["zzz"], capsys, "run groups under", "demo, empty", prog="slm-status")
    monkeypatch.setenv("SLM_RUNS", str(tmp_path / "none"))
    _fails(run, [], capsys, "none: no such directory", prog="slm-status")


def test_the_docs_name_every_job_state_slm_status_prints():
    """docs/training.md's vocabulary and the README's slm-status line name every state of slm.runs.states.STATES."""
    from slm.runs import states as status

    training = (ROOT / "docs" / "training.md").read_text().split("**Job states.**", 1)[1].split("\n\n", 1)[0]
    readme = next(line for line in (ROOT / "README.md").read_text().splitlines() if "slm-status runs/" in line)
    for state in status.STATES:
        assert f"`{state}`" in training, state
        assert re.search(rf"\b{state}\b", readme.split("#", 1)[1]), state


# ================================================================================ slm-train --help and defaults
def _listed(help_text: str, section: str) -> list[str]:
    """The names at the start of the indented lines of a help section (up to the next blank line)."""
    block = help_text.split(f"\n{section}", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^  ([a-z0-9_]+)\s", block, re.M)


def test_train_help_describes_slm(tmp_path):
    out = _script("slm-train", "--help")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Powered by Hydra" not in text and "is powered by Hydra" not in text
    assert text.startswith("slm-train: train one small language model") and "slm-train -m sweep=smoke" in text
    for group, where in (("model", "conf/model"), ("tokenizer", "conf/tokenizer"), ("data", "conf/data"),
                         ("eval", "conf/eval")):
        names = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
        listed = _listed(text, f"{group}=<")
        assert sorted(listed) == names, (group, listed)  # every option, once, with a description
        assert where in text
    assert "base" not in _listed(text, "model=<")  # conf/model_base/base.yaml is not a preset
    # sweeps: the runnable ones set their run_group; those that cannot run alone are listed apart
    sweeps_block = text.split("\nsweep=<", 1)[1].split("\n\n", 1)[0]
    runnable, apart = sweeps_block.split("Not sweeps by themselves:")
    files = {p.stem: yaml.safe_load(p.read_text()) or {} for p in shipped_sweeps()}
    standalone = sorted(n for n, cfg in files.items() if "run_group" in cfg)
    assert sorted(re.findall(r"^  ([a-z0-9_]+)\s", runnable, re.M)) == standalone
    assert sorted(re.findall(r"^  ([a-z0-9_]+)\s", apart, re.M)) == sorted(set(files) - set(standalone))


def test_default_model_is_the_laptop_sized_one_and_every_sweep_names_its_model():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from slm.cli.config import compose_config, register_resolvers
    from slm.model import config_from_spec, count

    cfg = compose_config([])
    model = config_from_spec(OmegaConf.to_container(cfg.model, resolve=True) | {"vocab_size": 65})
    assert model.family == "debug" and count(model).params_total < 200_000 and cfg.train.length.tokens == 1e6
    register_resolvers()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        for path in shipped_sweeps():
            sweep = compose("config", overrides=[f"sweep={path.stem}"], return_hydra_config=True)
            if "run_group" not in (yaml.safe_load(path.read_text()) or {}):
                continue  # not a sweep by itself
            points = OmegaConf.select(sweep, "hydra.sweeper.points", throw_on_resolution_failure=False)  # None: a
            points = OmegaConf.to_container(points or OmegaConf.create([]))  # study's best (search_cpu_top), not there
            named = all(any(str(o).startswith("model=") for o in p) for p in points) and points
            assert named or sweep.model.family != "debug" or path.stem == "smoke", path.stem


def test_a_users_own_sweep_file_is_not_a_shipped_one(tmp_path):
    """The tests over every shipped sweep read git's list: a file a user puts in sweeps/ (where the README sends it)
    is not checked against the help text and the shipped sweeps' rules."""
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "ours.yaml").write_text("run_group: ours\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "sweeps/ours.yaml"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=tmp_path, check=True)
    (tmp_path / "sweeps" / "mine.yaml").write_text("run_group: mine\n")  # the user's, not committed
    assert [p.name for p in shipped_sweeps(tmp_path)] == ["ours.yaml"]
