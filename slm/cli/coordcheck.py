"""`slm-coordcheck [hydra overrides] [options] -o DIR`: the μP coordinate check (Yang et al. 2022, arXiv 2203.03466,
Appendix D.1). For each parametrization and width, the composed model is trained a few steps on fixed batches of
the configured data, and the RMS of each layer's output is recorded at every step (slm.training.coordcheck).
Under a correct μP every curve is flat in width; under sp the logits and hidden states grow with it.

    slm-coordcheck model=llama3 -o runs/coordcheck                 # make coordcheck
    slm-coordcheck model=gpt2 train.lr=1e-2 --schemes sp,mup,completep -o /tmp/cc
    slm-coordcheck model=debug --widths 32,64,128,256 --steps 10 --seeds 3 -o /tmp/cc

Options:
    --widths W,W,...  d_model values; heads follow the width (n_heads = d_model / head_dim), so each must be a
                      multiple of the model's attention.head_dim; default: the multiples of head_dim nearest 64,
                      128, 256, 512 and 1024
    --steps N         training steps, each recorded before its update (default 5)
    --seeds N         seeds train.seed, train.seed + 1, ... averaged (default 1)
    --schemes A,B     model.parametrization.kind values to compare (default sp,mup)
    --layers N        model.n_layers (default 3, unless model.n_layers=... is given: depth does not change what
                      a width check shows, and 32 layers at width 1024 take long on a CPU)
    --context N       model.context_length (default 64, unless model.context_length=... is given)
    --batch N         windows per step (default 8, unless train.batch_size=... is given)
    -o, --out DIR     where coordcheck.json (rows and settings) and coordcheck.png go (required)

Everything else comes from the composed config: the model's other fields (mlp.d_ff, when set, stays fixed, so set it
null for an exact check), model.parametrization.base_width, train.lr, optimizer, train.optim.adamw (betas,
weight_decay, eps), grad_clip (the lr is constant: no warmup or decay), train.seed (model init and the batches), the
data and the tokenizer (the vocabulary is the tokenizer's). model.attention.n_kv_heads is set to null (= n_heads)
unless given, since a preset's fixed KV head count does not divide the head counts of small widths. The loss is
always causal_lm's. Runs on a GPU when one is visible (train.parallel.accelerator auto or gpu), else on the CPU.
llama3 (head_dim 48) is checked at widths 48, 144, 240, 528, 1008 in under two minutes on two CPU cores.

DIR/coordcheck.json holds the settings, rows {scheme, width, seed, step, layer, rms} (layers: embedding,
block.<i>, final_norm, logits) and, per scheme and layer, the slope of log RMS against log width at the last
step. DIR/coordcheck.png: one row of panels per scheme (embedding, middle block, last block, logits), RMS against
width, one line per step; the printed headline gives the slopes of those same layers, one column each.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from slm.bad_input import fail
from slm.cli.config import compose_config, reports_user_errors
from slm.pipes import quiet_on_closed_pipe
from slm.settings import nested

PROG = "slm-coordcheck"
DEFAULTS = {"steps": 5, "seeds": 1, "schemes": "sp,mup", "layers": 3, "context": 64, "batch": 8}
TARGET_WIDTHS = (64, 128, 256, 512, 1024)


def parse(argv: list[str]) -> tuple[list[str], dict]:
    """(hydra overrides, options); a bad option is one line and exit 2."""
    names = {"--widths": "widths", "--steps": "steps", "--seeds": "seeds", "--schemes": "schemes",
             "--layers": "layers", "--context": "context", "--batch": "batch", "-o": "out", "--out": "out"}
    overrides, options, args = [], {}, list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith("-"):
            overrides.append(arg)
            continue
        flag, eq, value = arg.partition("=")
        if flag not in names:
            fail(PROG, f"unknown option {flag!r}: choose from {', '.join(sorted(set(names)))} (see --help)")
        if not eq:
            if not args:
                fail(PROG, f"{flag} needs a value")
            value = args.pop(0)
        options[names[flag]] = value
    if "out" not in options:
        fail(PROG, "-o DIR is required: where coordcheck.json and coordcheck.png go")
    for name in ("steps", "seeds", "layers", "context", "batch"):
        if name in options:
            options[name] = _positive(f"--{name}", options[name])
    if "widths" in options:
        options["widths"] = [_positive("--widths", w) for w in options["widths"].split(",") if w.strip()]
        if len(options["widths"]) < 2:
            fail(PROG, f"--widths={','.join(map(str, options['widths']))}: give at least two widths to compare")
    options["schemes"] = [s.strip() for s in options.get("schemes", DEFAULTS["schemes"]).split(",") if s.strip()]
    return overrides, options


def _positive(flag: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        fail(PROG, f"{flag}={text!r} is invalid: a positive integer")
    return value


def set_keys(overrides: list[str]) -> set[str]:
    """The config keys the overrides set (model.n_layers=2 -> model.n_layers)."""
    return {o.split("=")[0].lstrip("+~") for o in overrides if "=" in o}


def chosen(option: str, key: str, value, overrides: list[str], options: dict):
    """An option's value: given as --option, else `value` (the composed config's) where the user set `key` on
    the command line, else the CLI's default."""
    if option in options:
        return options[option]
    return value if key in set_keys(overrides) else DEFAULTS[option]


def model_spec(model_node: dict, overrides: list[str], options: dict, vocab_size: int) -> dict:
    """The model node the check scales: the composed one with the CLI's cheaper defaults where the user set no
    value (n_layers, context_length, attention.n_kv_heads) and the tokenizer's vocabulary."""
    spec = {**model_node, "vocab_size": vocab_size}
    for option, field in (("layers", "n_layers"), ("context", "context_length")):
        spec[field] = chosen(option, f"model.{field}", spec[field], overrides, options)
    if "model.attention.n_kv_heads" not in set_keys(overrides):
        spec = nested({**spec, "attention.n_kv_heads": None})
    return spec


def with_scheme(spec: dict, scheme: str) -> dict:
    """`spec` under the parametrization `scheme` (model.parametrization.kind)."""
    return nested({**spec, "parametrization.kind": scheme})


def default_widths(head_dim: int) -> list[int]:
    """The multiples of head_dim nearest TARGET_WIDTHS (distinct, at least head_dim)."""
    return sorted({max(1, round(t / head_dim)) * head_dim for t in TARGET_WIDTHS})


def check_inputs(spec: dict, widths: list[int], schemes: list[str]) -> None:
    """Every scheme known and every width a valid causal model under every scheme, before the data is prepared."""
    from slm.components.parametrization import PARAMETRIZATIONS
    from slm.training.coordcheck import width_config

    known = PARAMETRIZATIONS.keys()
    for name in schemes:
        if name not in known:
            fail(PROG, f"--schemes: unknown parametrization {name!r}: choose from {', '.join(known)}")
    model = width_config(spec, spec["d_model"])
    if model.kind != "transformer":
        fail(PROG, f"model.kind={model.kind}: the coordinate check varies a transformer's width (d_model with "
                   "heads following it); a window model has no residual stream to check")
    if not model.attention.causal:
        fail(PROG, "model.attention.causal=false: the coordinate check trains with the causal LM loss, which needs a "
                   "causal model (set model.attention.causal=true to check the same network causally)")
    head_dim = model.attention.head_dim
    bad = [w for w in widths if w % head_dim]
    if bad:
        fail(PROG, f"--widths: {bad[0]} is not a multiple of the model's head_dim={head_dim} (heads follow the "
                   f"width); e.g. --widths {','.join(map(str, default_widths(head_dim)))}")
    for name in schemes:
        for w in widths:
            width_config(with_scheme(spec, name), w)  # a ConfigError is one line


def training_batches(prepared, batch_size: int, context: int, seed: int, sampling: str, n: int) -> list:
    """The first n training batches of the data mix, as slm-train draws them (token windows (B, T+1))."""
    import torch

    from slm.data.mix import TrainSampler

    sampler = TrainSampler.of(prepared.sources, batch_size, context, seed, sampling)
    return [torch.from_numpy(sampler.batch(i)) for i in range(n)]


def plotted_layers(n_layers: int) -> dict[str, str]:
    """{layer: its panel title} of the layers coordcheck.png draws, input to output: the embedding, the middle and
    the last block (one column when they are the same block) and the logits; the printed headline reads the same."""
    return {"embedding": "embedding", f"block.{n_layers // 2}": f"block {n_layers // 2} (middle)",
            f"block.{n_layers - 1}": f"block {n_layers - 1} (last)", "logits": "logits"}


def headline(slopes: dict, schemes: list[str], n_layers: int, steps: int) -> list[str]:
    """The printed summary: per scheme, the slope of log RMS against log width at the last step of each layer the
    figure draws (plotted_layers), in the figure's order and words; coordcheck.json has every layer's."""
    names = plotted_layers(n_layers)
    width = max(len(t) for t in names.values())
    lines = [f"slope of log RMS against log width at step {steps} (about 0 under a correct muP), for the layers "
             "coordcheck.png draws:", " " * 12 + "  ".join(t.rjust(width) for t in names.values())]
    for scheme in schemes:
        lines.append(f"  {scheme:10s}" + "  ".join(f"{round(slopes[scheme][layer], 2) + 0.0:+.2f}".rjust(width)
                                                   for layer in names))  # + 0.0: no "-0.00"
    return lines


def plot(rows: list[dict], schemes: list[str], n_layers: int, title: str):
    """One row of panels per scheme, one column per layer (plotted_layers: embedding, middle and last block,
    logits; a column shares its y axis, at least a decade): RMS against width, one line per step."""
    import math

    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    names = plotted_layers(n_layers)
    layers = list(names)  # one block column when the middle block is the last
    steps = sorted({r["step"] for r in rows})
    widths = sorted({r["width"] for r in rows})
    cmap = matplotlib.colormaps["viridis"]
    fig = Figure(figsize=(3.3 * len(layers), 2.7 * len(schemes) + 0.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(schemes), len(layers), squeeze=False, sharey="col")
    for j, layer in enumerate(layers):
        for i, scheme in enumerate(schemes):
            ax = axes[i][j]
            for k, step in enumerate(steps):
                points = sorted((r["width"], r["rms"]) for r in rows
                                if r["scheme"] == scheme and r["layer"] == layer and r["step"] == step)
                ax.plot(*zip(*points), marker="o", ms=3, color=cmap(k / max(1, len(steps) - 1) * 0.9),
                        label=f"step {step}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(widths, [str(w) for w in widths], fontsize=7)
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_title(f"{scheme}: {names[layer]}", fontsize=9)
            ax.grid(alpha=0.3, which="both")
        low, high = axes[0][j].get_ylim()
        if high / low < 10:  # a nearly flat column: show it on a decade, not magnified
            middle = math.sqrt(low * high)
            axes[0][j].set_ylim(middle / math.sqrt(10), middle * math.sqrt(10))
        axes[-1][j].set_xlabel("width (d_model)")
    for i in range(len(schemes)):
        axes[i][0].set_ylabel("RMS of the output")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    return fig


def measure_schemes(spec: dict, schemes: list[str], widths: list[int], train_cfg, batches, steps: int,
                    seeds: list[int], device: str) -> list[dict]:
    """measure()'s rows for every scheme, each with its `scheme`; a line on stderr per scheme and width."""
    from slm.training.coordcheck import measure

    rows = []
    for scheme in schemes:
        for width in widths:
            started = time.perf_counter()
            measured = measure(with_scheme(spec, scheme), [width], train_cfg, batches, steps, seeds, device)
            rows += [{"scheme": scheme, **r} for r in measured]
            print(f"  {scheme} width {width}: {time.perf_counter() - started:.1f}s", file=sys.stderr, flush=True)
    return rows


def summary(rows: list[dict], schemes: list[str]) -> tuple[list[dict], dict]:
    """(rows averaged over seeds, each with its scheme; {scheme: {layer: slope at the last step}})."""
    from slm.training.coordcheck import average, slope

    means = [{"scheme": scheme, **r} for scheme in schemes
             for r in average([r for r in rows if r["scheme"] == scheme])]
    layers = list(dict.fromkeys(r["layer"] for r in rows))  # input to output
    return means, {scheme: {layer: slope([r for r in means if r["scheme"] == scheme], layer) for layer in layers}
                   for scheme in schemes}


@reports_user_errors(PROG)
def run(argv: list[str]) -> None:
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip())
        return
    overrides, options = parse(argv)
    import torch
    from omegaconf import OmegaConf

    from slm.atomic import atomic_save
    from slm.data import prepare
    from slm.runs.record import write_json_atomic
    from slm.training.config import TrainConfig
    from slm.training.coordcheck import width_config

    cfg = OmegaConf.to_container(compose_config(overrides), resolve=True)
    train_cfg = TrainConfig.from_node(cfg["train"])
    steps, schemes = options.get("steps", DEFAULTS["steps"]), options["schemes"]
    seeds = [train_cfg.seed + i for i in range(options.get("seeds", DEFAULTS["seeds"]))]
    spec = model_spec(cfg["model"], overrides, options, cfg["model"]["vocab_size"])
    head_dim = width_config(spec, spec["d_model"]).attention.head_dim
    widths = options.get("widths") or default_widths(head_dim)
    check_inputs(spec, widths, schemes)
    prepared = prepare(cfg["data"], cfg["tokenizer"])
    spec["vocab_size"] = prepared.vocab_size
    context, family = spec["context_length"], spec.get("family", "custom")
    base = width_config(spec, spec["d_model"]).parametrization.base_width
    batch = chosen("batch", "train.batch_size", train_cfg.batch_size, overrides, options)
    batches = training_batches(prepared, batch, context, train_cfg.seed, train_cfg.window_sampling, steps)
    device = "cuda" if torch.cuda.is_available() and train_cfg.parallel.accelerator in ("auto", "gpu", "cuda") else "cpu"
    setup = (f"n_layers={spec['n_layers']}, context {context}, batch {batch}, {train_cfg.optimizer} lr "
             f"{train_cfg.lr:g}, base width {base}")
    print(f"{PROG}: {family}, {setup}, {steps} step{'' if steps == 1 else 's'} x {len(seeds)} seed(s), widths {','.join(map(str, widths))} "
          f"on {device}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    rows = measure_schemes(spec, schemes, widths, train_cfg, batches, steps, seeds, device)
    means, slopes = summary(rows, schemes)
    out = Path(options["out"])
    write_json_atomic(out / "coordcheck.json", {
        "settings": {"model": family, "widths": widths, "steps": steps, "seeds": seeds, "schemes": schemes,
                     "n_layers": spec["n_layers"], "head_dim": head_dim, "context_length": context,
                     "vocab_size": spec["vocab_size"], "batch_size": batch, "optimizer": train_cfg.optimizer,
                     "lr": train_cfg.lr, "weight_decay": train_cfg.optim.adamw.weight_decay, "grad_clip": train_cfg.grad_clip,
                     "base_width": base, "device": device, "data": prepared.config.name, "overrides": overrides,
                     "seconds": round(time.perf_counter() - started, 1)},
        "slopes_at_last_step": slopes,
        "rows": rows})
    fig = plot(means, schemes, spec["n_layers"], f"{family} coordinate check: {setup}")
    atomic_save(out / "coordcheck.png", lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    print("\n".join(headline(slopes, schemes, spec["n_layers"], steps)))
    print(f"wrote {out / 'coordcheck.json'} and {out / 'coordcheck.png'}")


@quiet_on_closed_pipe
def main() -> None:
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
