"""bench-gpu's checks: every fast path the benchmark measures, against its reference, on the device that measures it
(`make bench-gpu` runs them first; any failure makes the command exit 1 after printing everything).

    flex     FlexAttention (slm.components.flex.flex_attend: compiled flex_attention with the BlockMask of a
             `Masking`; on the CPU the uncompiled flex_eager) against scaled_dot_product_attention given the same
             mask as a dense boolean tensor written from the definitions (causal j <= i, window |i - j| < W, block
             j // B <= i // B, documents doc[i] == doc[j]), on the same q, k, v in float64; soft-capped scores,
             which SDPA cannot express, against the scores written out (cap * tanh(s / cap), masked, softmax).
             Kinds: causal+window, bidirectional+block, causal+document, bidirectional+block+document and
             causal+window+softcap, at the first family's heads and context (q, k scaled so that the softmax is
             peaked: one wrongly visible key then moves outputs by far more than rounding). On CUDA the
             gradients of q, k and v too (training runs flex's backward); the CPU has none. Each row also
             checks that Masking.dense(), the SDPA path's mask, equals the definition.
    loss     the chunked head + loss (slm.objectives.linear_ce.ChunkedPath) and, on CUDA where liger_kernel is
             installed, Liger's (LigerPath) against the plain path (the head's whole logits, then
             F.cross_entropy), under the training precision (bf16 autocast on CUDA), on the same hidden states
             (the first family's network, seed 0, on random windows) and head weights: the loss and its
             gradients with respect to the hidden states and the head's weight; a ragged last chunk and ignored
             targets; also with masked diffusion's row weights and excluded token (reduction sum), and with a
             soft-capped head.
    decode   the Decoder the benchmark times (on CUDA the chained greedy CUDA graph, and the per-step CUDA graph
             that sampling uses; on the CPU, which has no CUDA graph, the chain run eagerly) against the
             step-by-step decoder (eager, growing cache), greedy, the same float32 weights and 16 ragged
             prompts, for each autoregressive family.
    compile  the trainer's compiled step (train.compile: LanguageModelModule.configure_model, under bf16
             autocast on CUDA) against the same step eager in the same precision, on the same weights and batch
             (the first family, at most 16 of its windows): the loss and every parameter's gradient at init, and
             the loss again after `learn`'s 50 steps (at init the loss is ~ln V whatever the network computes;
             trained, it is not). --smoke compiles with backend aot_eager (Dynamo's graph capture and
             AOTAutograd, no Inductor code generation: seconds rather than a minute on a CPU) in float32.
    learn    the same compiled module trained 50 steps (slm.training.step.train_step: the objective, backward,
             clipping, the run's optimizer at its peak learning rate, no schedule) on one fixed batch of
             learnable tokens (each row a cycle through 16 token ids): the mean loss of the last 5 steps must
             be at least LEARN_MARGIN nats under the first step's.

Tolerances. A tensor passes when max |fast - reference| <= rtol * max |reference| (its scale: rounding errors are
relative to the values that are summed); a row shows the worst of its tensors (by the ratio to its tolerance).

- float32 against float64 (flex on the CPU): float32 rounds at 6e-8; a softmax-weighted sum of unit values, or a
  head over a few hundred channels, accumulates at most ~1e-6 of the scale, so FP32_RTOL = 1e-5 is ten times the
  rounding and a hundred times smaller than one wrongly masked key of a peaked softmax.
- float32 paths against each other (chunked vs plain loss, aot_eager vs eager): the same float32 operations in
  a different order and grouping, ~1e-6 of the scale: FP32_RTOL for losses and outputs, FP32_GRAD_RTOL = 1e-4 for
  gradients (sums over thousands of rows or tokens, and through every layer of the network).
- bfloat16 (CUDA): 8 significant bits, unit roundoff u = 2^-9 = 0.002. Flex's bf16 output is a softmax-weighted
  sum with the probabilities rounded to bf16 (<= u of max|v|) and the result rounded (u): BF16_RTOL = 2^-5 = 0.031
  leaves 4-8x room (bf16 flex_eager on a CPU, the inputs rounded too, measured 0.004-0.008); its gradients round the probabilities and dS once more and accumulate over T keys:
  BF16_GRAD_RTOL = 2^-4. The loss paths under autocast share their bf16 logits up to a matmul's accumulation
  order (a last-bit difference, 2^-8 relative, in a few logits); their gradients are float32 softmax minus
  one-hot, rounded to bf16 once in both, then bf16 matmuls: BF16_RTOL. A bug (a dropped chunk, a gradient scaled
  twice, a missing soft-cap derivative, a mask off by one block) is off by O(1) of the scale.
- the soft-capped head in bf16: the plain path caps the bf16 logits in bf16 (tanh and its derivative rounded to
  bf16, ~1e-2 of dh's scale measured with CPU autocast), the chunked path in float32: BF16_GRAD_RTOL.
- the compiled bf16 step against eager: Inductor fuses pointwise chains in float32 where eager rounds each op to
  bf16, so the two differ by bf16 rounding compounded through every layer (~1e-2 of the scale):
  COMPILE_LOSS_RTOL = 2^-5 of the loss or of 1 nat, whichever is larger (0.3 nats at init, where any sane network
  gives ~ln V; 0.03-0.1 once trained, where a wrong graph is off by nats; the floor because a loss trained near 0
  is a sum of exp(-margin) terms whose relative error is the bf16 error of the margins, ~1e-1),
  COMPILE_GRAD_RTOL = 2^-3 on each parameter's gradient: wide for rounding, still 8x under a wrong kernel's O(1)
  error.
- decode: greedy tokens must be equal. Both decoders run in float32 with TF32 off: in bf16 the two paths' logits
  differ by ~1e-2, which flips the argmax of random weights' near-uniform logits within a few tokens. Where a row
  still diverges, the full-sequence forward scores the shared prefix: the divergence is a near-tie, not a
  mismatch, when the two chosen tokens' logits there differ by <= DECODE_TIE (1e-4: float32 logits of this size
  agree to ~1e-6; a cache or graph bug moves them by far more). A mixture of experts may also diverge through a
  top-k routing near-tie inside the network (a discrete choice that rounding can flip, and that then moves the
  logits by much more than rounding): up to a quarter of its rows may diverge beyond DECODE_TIE; a broken decoder
  diverges in every row.
- learn: a drop of >= LEARN_MARGIN = 1 nat: the first step's loss is ~ln V (~10.8 nats) and the batch's tokens
  alone (16 of them) bring it towards ln 16 = 2.8 and, their order being a fixed cycle, towards 0; a run that
  does not learn drops by ~0.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
from contextlib import contextmanager, nullcontext

import torch
import torch.nn.functional as F

CHECKS = ("flex", "loss", "decode", "compile", "learn")
COLUMNS = ("check", "family/shape", "compared", "max abs diff", "tolerance", "ok")

FP32_RTOL = 1e-5
FP32_GRAD_RTOL = 1e-4
BF16_RTOL = 2**-5
BF16_GRAD_RTOL = 2**-4
COMPILE_LOSS_RTOL = 2**-5
COMPILE_GRAD_RTOL = 2**-3
DECODE_TIE = 1e-4
DECODE_NEW = 40
"""New tokens a row in the decode check: more than slm.model.generate.CHAIN_CHECK, so the chain reads back once."""
LEARN_STEPS = 50
LEARN_MARGIN = 1.0
ATTENTION_SOFTCAP = 2.0
"""Small enough that the cap bends the scores (std ~2 here): a wrong soft-cap or its derivative shows."""
HEAD_SOFTCAP = 0.5
"""Likewise for the head's logits (std ~0.2-0.5 at init)."""
MIN_S = {"flex": 60.0, "loss": 20.0, "decode": 20.0, "compile": 150.0}
"""Seconds of --budget-s a check group needs left to start on CUDA (compile: Inductor's compile of the step and its
50 learning steps); --smoke: none."""


def log(message: str) -> None:
    print(f"bench-gpu: {message}", file=sys.stderr, flush=True)


def one_line(err: BaseException, limit: int = 240) -> str:
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def autocast(train_cfg, device: torch.device):
    """As bench/gpu.py's: Lightning's bf16-mixed is autocast to bfloat16 around the forward and the loss."""
    if str(train_cfg.precision).startswith("bf16"):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return nullcontext()


def cuda(opts) -> bool:
    return opts.device.type == "cuda"


# ---------------------------------------------------------------------------------------------- comparing
def compare(pairs: dict[str, tuple]) -> dict:
    """{name: (fast, reference, rtol[, floor])} -> for each tensor max |fast - reference| and its tolerance
    rtol x max(max |reference|, floor); the worst by the ratio of the two, and whether every one is within its
    tolerance."""
    per = {}
    for name, (fast, ref, rtol, *floor) in pairs.items():
        fast = torch.as_tensor(fast).detach().double()
        ref = torch.as_tensor(ref).detach().double().to(fast.device)
        if fast.shape != ref.shape:
            diff = math.inf
        else:
            diff = float(torch.nan_to_num((fast - ref).abs(), nan=math.inf).max()) if fast.numel() else 0.0
        scale = max([float(ref.abs().max()) if ref.numel() else 0.0, *floor])
        per[name] = {"max_abs_diff": diff, "tolerance": rtol * scale, "rtol": rtol, "ref_max_abs": scale}
    def ratio(name):
        d, t = per[name]["max_abs_diff"], per[name]["tolerance"]
        return math.inf if d > t else (d / t if t > 0 else 0.0)
    worst = max(per, key=ratio)
    ok = all(p["max_abs_diff"] <= p["tolerance"] for p in per.values())
    return {"max_abs_diff": per[worst]["max_abs_diff"], "tolerance": per[worst]["tolerance"],
            "worst": worst if len(per) > 1 else None, "ok": ok, "tensors": per}


def row(check: str, name: str, family: str, shape: str, compared: str, **fields) -> dict:
    return {"check": check, "name": name, "family": family, "shape": shape, "compared": compared,
            "max_abs_diff": None, "tolerance": None, "worst": None, "ok": None, "note": "", **fields}


def failed(r: dict, err: BaseException) -> dict:
    r.update(ok=False, note=f"error: {one_line(err)}", error=one_line(err, 2000))
    return r


def sci(x: float | None) -> str:
    if x is None:
        return "-"
    return "inf" if math.isinf(x) else ("0" if x == 0 else f"{x:.2e}")


def cells(r: dict) -> dict[str, str]:
    """A check's table cells (COLUMNS)."""
    if r["check"] == "learn" and r.get("losses"):
        diff = f"drop {r['drop']:.2f} ({r['first_loss']:.2f} -> {r['last_loss']:.2f})"
        tol = f">= {LEARN_MARGIN:g}"
    else:
        diff = sci(r["max_abs_diff"]) + (f" ({r['worst']})" if r.get("worst") else "")
        tol = sci(r["tolerance"])
    ok = {True: "ok", False: "FAIL", None: "-"}[r["ok"]]
    if r["note"]:
        ok = f"{ok}: {r['note']}" if r["ok"] is not None else r["note"]
    return {"check": f"{r['check']} {r['name']}", "family/shape": f"{r['family']} {r['shape']}".strip(),
            "compared": r["compared"], "max abs diff": diff, "tolerance": tol, "ok": ok}


# ---------------------------------------------------------------------------------------------- flex
def allowed(T: int, causal: bool, window: int | None, block: int | None, docs: torch.Tensor | None,
            device: torch.device) -> torch.Tensor:
    """(B or 1, 1, T, T) True where query i may attend to key j, from the definitions (module docstring)."""
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    ok = j <= i if causal else torch.ones(T, T, dtype=torch.bool, device=device)
    if window is not None:
        ok = ok & ((i - j).abs() < window)
    if block is not None:
        ok = ok & (j // block <= i // block)
    ok = ok[None, None]
    if docs is not None:
        ok = ok & (docs[:, :, None] == docs[:, None, :])[:, None]
    return ok


def reference_attention(q, k, v, mask: torch.Tensor, scale: float, softcap: float | None) -> torch.Tensor:
    """SDPA with the dense boolean mask; soft-capped: the scores written out (SDPA cannot cap them)."""
    groups = q.shape[1] // k.shape[1]
    if softcap is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=groups > 1)
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    s = (q @ k.transpose(-2, -1)) * scale
    s = softcap * torch.tanh(s / softcap)
    return s.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v


def flex_checks(s, opts) -> list[dict]:
    """FlexAttention against SDPA with the dense mask, per mask kind (module docstring)."""
    from slm.components import flex

    device, on_cuda = opts.device, cuda(opts)
    a, T = s.model_cfg.attention, s.model_cfg.context_length
    B, H, KV, hd = 2, a.n_heads, a.n_kv_heads, a.head_dim
    dtype = torch.bfloat16 if on_cuda else torch.float32
    out_rtol, grad_rtol = (BF16_RTOL, BF16_GRAD_RTOL) if on_cuda else (FP32_RTOL, None)
    shape = f"B{B} T{T} heads {H}/{KV}x{hd} {'bf16' if on_cuda else 'fp32'}"
    fast_name = "flex compiled" if on_cuda else "flex_eager"
    grads = ", dq, dk, dv" if on_cuda else " (no flex backward on CPU)"
    gen = torch.Generator().manual_seed(0)
    # (B, T, heads, hd) seen transposed, as the model's projections are; q and k scaled: a peaked softmax
    q0 = 1.5 * torch.randn(B, T, H, hd, generator=gen)
    k0, v0 = 1.5 * torch.randn(B, T, KV, hd, generator=gen), torch.randn(B, T, KV, hd, generator=gen)
    dout = torch.randn(B, H, T, hd, generator=gen)
    end = 3
    idx = torch.randint(4, 1000, (B, T), generator=gen)
    idx[torch.rand(B, T, generator=gen) < 3 / T] = end
    idx[0, [0, T // 3, T // 3 + 1]] = end  # a one-token document first, and one in the middle
    idx[B - 1, [T // 2, T - 1]] = end
    docs = flex.document_ids(idx, end).to(device)
    window, block = T // 2 - 3, max(2, T // 16)  # neither a multiple of flex's 128-position blocks on CUDA
    kinds = [(True, window, None, None, None), (False, None, block, None, None), (True, None, None, docs, None),
             (False, None, block, docs, None), (True, window, None, None, ATTENTION_SOFTCAP)]
    scale = hd ** -0.5
    rows = []
    for causal, win, blk, dd, cap in kinds:
        masking = flex.Masking(T, causal, win, blk, dd, device)
        name = flex.attention_kind(masking, cap is not None)
        ref_name = "scores written out" if cap is not None else "SDPA"
        r = row("flex", name, s.family, shape, f"{fast_name} vs {ref_name} + dense mask (fp64): out{grads}")
        try:
            mask = allowed(T, causal, win, blk, dd, device)
            dense = masking.dense()
            dense_ok = dense is not None and torch.equal(dense.expand(mask.shape[0], 1, T, T), mask)
            leaves = [t.to(device, dtype).requires_grad_(on_cuda) for t in (q0, k0, v0)]
            q, k, v = (t.transpose(1, 2) for t in leaves)
            out = flex.flex_attend(q, k, v, masking, scale, cap, compiled=on_cuda)
            refs = [t.detach().double().requires_grad_(on_cuda) for t in leaves]
            rq, rk, rv = (t.transpose(1, 2) for t in refs)
            want = reference_attention(rq, rk, rv, mask, scale, cap)
            pairs = {"out": (out, want, out_rtol)}
            if on_cuda:
                g = torch.autograd.grad(out, leaves, dout.to(device, dtype))
                gr = torch.autograd.grad(want, refs, dout.to(device, dtype).double())  # the same rounded values
                pairs.update({n: (a_, b_, grad_rtol) for n, a_, b_ in zip(("dq", "dk", "dv"), g, gr)})
            r.update(compare(pairs))
            if not dense_ok:
                r.update(ok=False, note="Masking.dense() is not the definition")
        except Exception as err:  # noqa: BLE001 - a failing kernel is a failed check
            failed(r, err)
        rows.append(r)
    return rows


# ---------------------------------------------------------------------------------------------- loss
def loss_checks(s, opts) -> list[dict]:
    """The chunked (and Liger) head + loss against the plain path: loss and gradients (module docstring)."""
    from slm.model import build_model
    from slm.objectives.linear_ce import (IGNORE_INDEX, ChunkedPath, LigerPath, cross_entropy, fused_head_ok,
                                          liger_installed)

    device, on_cuda, cfg = opts.device, cuda(opts), s.model_cfg
    torch.manual_seed(0)
    model = build_model(cfg).to(device)  # float32 weights, as trained: autocast casts them in the forward
    bf16 = str(s.train_cfg.precision).startswith("bf16")
    rtol, grad_rtol = (BF16_RTOL, BF16_RTOL) if bf16 else (FP32_RTOL, FP32_GRAD_RTOL)
    if not fused_head_ok(model):
        return [row("loss", "chunked", s.family, "", "-", note=f"skipped: {cfg.kind} has no Transformer head")]
    gen = torch.Generator().manual_seed(0)
    windows = 8 if on_cuda else 2
    idx = torch.randint(0, s.data_vocab, (windows, cfg.context_length), generator=gen).to(device)
    with torch.no_grad(), autocast(s.train_cfg, device):
        hidden = model(idx, head=False)  # the hidden states the loss path reads, in the training precision
    h0 = hidden.reshape(-1, hidden.shape[-1])[:-3]  # 3 rows short: a ragged last chunk
    N, V = h0.shape[0], cfg.vocab_size
    chunk = min(s.train_cfg.loss.chunk_tokens, N // 4)
    targets = torch.randint(0, s.data_vocab, (N,), generator=gen)
    targets[torch.rand(N, generator=gen) < 0.05] = IGNORE_INDEX
    targets = targets.to(device)
    weights = (1 / (0.05 + 0.95 * torch.rand(N, generator=gen))).to(device)  # masked diffusion's 1/t, in [1, 20]
    exclude = cfg.embedding.mask_token_id if cfg.embedding.mask_token_id is not None else (
        s.data_vocab if s.data_vocab < V else None)  # a row no target is
    capped = build_model(dataclasses.replace(cfg, embedding=dataclasses.replace(cfg.embedding,
                                                                                logit_softcap=HEAD_SOFTCAP)))
    capped = capped.to(device)
    capped.load_state_dict(model.state_dict())
    shape = f"{N}x{V}, chunk {chunk}, {'bf16 autocast' if bf16 else 'fp32'}"
    # the plain path caps its bf16 logits in bf16 (tanh and its derivative rounded), the chunked one in float32
    capped_rtol = BF16_GRAD_RTOL if bf16 else grad_rtol
    variants = [("chunked", ChunkedPath(chunk), model, {}, grad_rtol),
                ("chunked mdlm", ChunkedPath(chunk), model,
                 dict(row_weights=weights, exclude=exclude, reduction="sum"), grad_rtol),
                ("chunked softcap", ChunkedPath(chunk), capped, {}, capped_rtol)]
    if on_cuda and liger_installed():
        variants.append(("liger", LigerPath(chunk), model, {}, grad_rtol))
    what = {"chunked": "", "chunked mdlm": " (row weights, excluded token, sum)",
            "chunked softcap": f" (head capped at {HEAD_SOFTCAP:g})", "liger": ""}
    rows = []
    for name, path, net, kwargs, g_rtol in variants:
        r = row("loss", name, s.family, shape, f"{name.split()[0]} vs plain{what[name]}: loss, dh, dW")
        try:
            weight = net.lm_head.weight

            def run(fn):
                h = h0.detach().clone().requires_grad_()
                with autocast(s.train_cfg, device):
                    loss = fn(h)
                return (loss, *torch.autograd.grad(loss, (h, weight)))

            fast = run(lambda h: path(net, h, targets, **kwargs))
            ref = run(lambda h: cross_entropy(net.head(h), targets, **kwargs))
            r.update(compare({"loss": (fast[0], ref[0], rtol), "dh": (fast[1], ref[1], g_rtol),
                              "dW": (fast[2], ref[2], g_rtol)}))
        except Exception as err:  # noqa: BLE001
            failed(r, err)
        rows.append(r)
    if not any(n == "liger" for n, *_ in variants):
        why = "liger_kernel not installed" if on_cuda else "Liger is CUDA-only"
        rows.append(row("loss", "liger", s.family, "", "-", note=f"skipped: {why}"))
    return rows


# ---------------------------------------------------------------------------------------------- decode
@contextmanager
def exact_float32():
    """float32 matmuls and convolutions in full float32 (no TF32) on CUDA, restored after."""
    before = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
              torch.backends.cudnn.allow_tf32)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before[1], before[2]


def decoder_name(dec) -> str:
    parts = ["chained" if dec.chain else "per-step", "CUDA graph" if dec.cuda_graph else "eager"]
    return " ".join(parts) + (" compiled" if dec.compiled else "")


def decode_check(s, opts) -> list[dict]:
    """The benchmark's decoders against the step-by-step one: greedy tokens (module docstring)."""
    from slm.model import build_model
    from slm.model.generate import Decoder

    device, on_cuda, cfg = opts.device, cuda(opts), s.model_cfg
    B, P = max(opts.batches), opts.prompt
    N = min(DECODE_NEW, cfg.context_length - P + 1)
    gen = torch.Generator().manual_seed(0)
    lens = [P - (7 * b) % max(1, P // 2) for b in range(B)]  # ragged: P, P - 7, ... (rows padded in the prefill)
    prompts = [torch.randint(0, s.data_vocab, (n,), generator=gen).tolist() for n in lens]
    shape = f"{B} prompts of {min(lens)}-{P} + {N} new, fp32"
    routed = cfg.moe.n_experts > 0
    allowed_rows = B // 4 if routed else 0
    rows = []
    with exact_float32():
        torch.manual_seed(0)
        model = build_model(cfg).eval().to(device)  # float32: see the module docstring
        capacity = P + N - 1
        if on_cuda:
            fast = {"chain": lambda: Decoder(model, B, capacity, compile=opts.decode_compile),
                    "graph": lambda: Decoder(model, B, capacity, compile=opts.decode_compile, chain=False)}
        else:
            fast = {"chain": lambda: Decoder(model, B, capacity, chain=True)}
        try:
            ref = Decoder(model, B, capacity, cuda_graph=False, chain=False).generate(prompts, N)
        except Exception as err:  # noqa: BLE001
            return [failed(row("decode", name, s.family, shape, "step-by-step decoder"), err) for name in fast]
        for name, make in fast.items():
            r = row("decode", name, s.family, shape, "")
            try:
                dec = make()
                if on_cuda and not dec.cuda_graph:  # a mixer that needs an eager cache (Titans' mac)
                    r.update(compared="-", note="skipped: no CUDA graph for this model (static_cache_ok)")
                    rows.append(r)
                    continue
                got = dec.generate(prompts, N)
                r.update(judge_tokens(model, prompts, got, ref, allowed_rows))
                ties = f", {r['near_ties']} rows part at near-ties" if r["near_ties"] else ""
                r["compared"] = (f"{decoder_name(dec)} vs per-step eager: {r['equal_tokens']}/{r['tokens']} "
                                 f"tokens equal{ties}" + (f" (MoE: <= {allowed_rows} rows may part)" if routed else "")
                                 + ("" if on_cuda else " (no CUDA graph on CPU)"))
            except Exception as err:  # noqa: BLE001
                r["compared"] = r["compared"] or name
                failed(r, err)
            rows.append(r)
        del model
    return rows


def judge_tokens(model, prompts, got, ref, allowed_rows: int) -> dict:
    """Equal tokens, row by row; at a row's first divergence the full-sequence forward of the shared prefix says
    how far apart the two chosen tokens' logits are (a near-tie: <= DECODE_TIE)."""
    device = next(model.parameters()).device
    gaps, equal, total, ties = [], 0, 0, 0
    for prompt, a, b in zip(prompts, got, ref):
        total += len(b)
        if a == b:
            equal += len(b)
            continue
        p = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if p is None:  # one stopped early: no token to weigh
            equal += min(len(a), len(b))
            gaps.append(math.inf)
            continue
        equal += p
        with torch.no_grad():
            z = model(torch.tensor([prompt + b[:p]], device=device))[0, -1].float()
        gap = abs(float(z[b[p]] - z[a[p]]))
        ties += gap <= DECODE_TIE
        gaps.append(gap)
    beyond = sum(g > DECODE_TIE for g in gaps)
    return {"max_abs_diff": max(gaps, default=0.0), "tolerance": DECODE_TIE, "ok": beyond <= allowed_rows,
            "equal_tokens": equal, "tokens": total, "near_ties": ties, "rows_beyond_tie": beyond,
            "note": f"{beyond} rows diverge beyond a near-tie" if beyond else ""}


# ---------------------------------------------------------------------------------------------- compile, learn
@contextmanager
def compile_backend(backend: str | None):
    """torch.compile with this backend inside the block (None: its default, Inductor)."""
    if backend is None:
        yield
        return
    real = torch.compile
    torch.compile = functools.partial(real, backend=backend)
    try:
        yield
    finally:
        torch.compile = real


def learnable_batch(s, batch: int) -> torch.Tensor:
    """(batch, T + 1) token windows, each a cycle through 16 fixed ids from its own offset: learnable."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randperm(s.data_vocab, generator=gen)[:16]
    T = s.model_cfg.context_length
    return ids[(torch.arange(batch)[:, None] + torch.arange(T + 1)[None, :]) % 16]


def train_checks(s, opts, which: list[str]) -> list[dict]:
    """compile (the compiled step against eager) and learn (50 steps of it), on one module (module docstring)."""
    from slm.training.module import LanguageModelModule
    from slm.training.step import step_loss, train_step

    device, on_cuda = opts.device, cuda(opts)
    train_cfg = s.train_cfg if s.train_cfg.compile else dataclasses.replace(s.train_cfg, compile=True)
    backend = None if on_cuda else "aot_eager"
    bf16 = str(train_cfg.precision).startswith("bf16")
    precision = "bf16 autocast" if bf16 else "fp32"
    # at most 16 windows: the eager step keeps every layer's activations (64 x 1024 tokens: tens of GB)
    B, T = min(train_cfg.batch_size, 16), s.model_cfg.context_length
    shape = f"batch {B}x{T}, {precision}"
    compiled = "inductor" if backend is None else backend
    trained = " at init and after learn" if "learn" in which else " at init"
    rows = {"compile": [row("compile", "loss", s.family, shape, f"{compiled} vs eager step: loss{trained}"),
                        row("compile", "grads", s.family, shape, f"{compiled} vs eager step: every gradient")],
            "learn": [row("learn", f"{LEARN_STEPS} steps", s.family, shape,
                          f"{compiled} step, peak lr, 16-id cycles: last 5 vs first loss")]}
    out = [r for k in CHECKS if k in which for r in rows.get(k, [])]
    batch = learnable_batch(s, B).to(device)
    try:
        torch.manual_seed(train_cfg.seed)
        module = LanguageModelModule(s.model_cfg, train_cfg, s.max_steps, s.tokens_per_step).to(device)
        module.train()
        params = [p for p in module.model.parameters() if p.requires_grad]

        def loss_of(forward):
            with autocast(train_cfg, device):  # with grad, as in training: the graph the steps compiled
                return step_loss(module.objective, forward, batch, seed=train_cfg.seed, step=0).loss

        def loss_and_grads(forward):
            loss = loss_of(forward)
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            return loss.detach(), [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]

        if "compile" in which:
            eager = loss_and_grads(module.model)
        with compile_backend(backend):
            module.configure_model()  # train.compile: the model, and the objective's head and loss with it
        loss_rtol = COMPILE_LOSS_RTOL if bf16 else FP32_RTOL
        losses_cmp = {}
        if "compile" in which:
            comp = loss_and_grads(module._forward)
            grad_rtol = COMPILE_GRAD_RTOL if bf16 else FP32_GRAD_RTOL
            losses_cmp["init"] = (comp[0], eager[0], loss_rtol, 1.0)
            rows["compile"][0].update(compare(losses_cmp))
            names = [n for n, p in module.model.named_parameters() if p.requires_grad]
            rows["compile"][1].update(compare({n: (g, e, grad_rtol) for n, g, e in zip(names, comp[1], eager[1])}))
            del eager, comp
        if "learn" in which:
            optimizer = module.configure_optimizers()["optimizer"]
            for group in optimizer.param_groups:  # the schedule's warm-up would keep 50 steps near lr 0
                peak = group.get("initial_lr", group["lr"])
                if isinstance(group["lr"], torch.Tensor):
                    group["lr"].fill_(float(peak))
                else:
                    group["lr"] = peak
            # step 0 each time: masked diffusion draws the same noise, so the objective is fixed as the batch is
            losses = [train_step(module.objective, module._forward, batch, optimizer, seed=train_cfg.seed, step=0,
                                 grad_clip=train_cfg.grad_clip, params=params, autocast=autocast(train_cfg, device))
                      for _ in range(LEARN_STEPS)]
            values = torch.stack(losses).float().tolist()
            first, last = values[0], sum(values[-5:]) / 5
            learn = rows["learn"][0]
            learn.update(losses=values, first_loss=first, last_loss=last, drop=first - last,
                         ok=all(math.isfinite(v) for v in values) and first - last >= LEARN_MARGIN)
            if not all(math.isfinite(v) for v in values):
                learn["note"] = "non-finite loss"
            del optimizer
            if "compile" in which:  # the trained network's loss is no longer ~ln V whatever the weights: sensitive
                losses_cmp["trained"] = (loss_of(module._forward).detach(), loss_of(module.model).detach(), loss_rtol,
                                         1.0)
                rows["compile"][0].update(compare(losses_cmp))
        del module
    except Exception as err:  # noqa: BLE001
        for r in out:
            if r["ok"] is None:
                failed(r, err)
    return out


# ---------------------------------------------------------------------------------------------- the run
def run_checks(opts, setups: list, clock) -> list[dict]:
    """Every check in opts.checks, on the first family of `setups` (flex, loss, compile, learn) and on each
    autoregressive one (decode); a group that would start with too little of --budget-s left is skipped."""
    rows: list[dict] = []
    if not setups:
        return rows
    first = setups[0]

    def budget(group: str, checks: list[str], family: str) -> bool:
        need = 0.0 if opts.smoke else MIN_S[group]
        if clock.left() >= need:
            return True
        note = f"skipped: {max(0.0, clock.left()):.0f} s left of --budget-s {opts.budget_s:g}"
        rows.extend(row(c, "all", family, "", "-", note=note) for c in checks)
        return False

    def timed(checks: list[str], s, fn, *args) -> None:
        start = time.perf_counter()
        group = f"{' and '.join(checks)} ({s.family})"
        log(f"checks: {group} ...")
        try:
            got = fn(s, opts, *args)
        except Exception as err:  # noqa: BLE001 - e.g. out of memory building the model: the group fails
            got = [failed(row(c, "all", s.family, "", "-"), err) for c in checks]
        bad = [f"{r['check']} {r['name']}" for r in got if r["ok"] is False]
        log(f"checks: {group} {'FAILED: ' + ', '.join(bad) if bad else 'ok'} ({time.perf_counter() - start:.0f} s)")
        rows.extend(got)

    if "flex" in opts.checks and budget("flex", ["flex"], first.family):
        timed(["flex"], first, flex_checks)
    if "loss" in opts.checks and budget("loss", ["loss"], first.family):
        timed(["loss"], first, loss_checks)
    if "decode" in opts.checks:
        for s in setups:
            if s.model_cfg.attention.causal and budget("decode", ["decode"], s.family):
                timed(["decode"], s, decode_check)
    which = [c for c in ("compile", "learn") if c in opts.checks]
    if which and budget("compile", which, first.family):
        timed(which, first, train_checks, which)
    return rows


def failures(rows: list[dict]) -> list[str]:
    return [f"{r['check']} {r['name']} ({r['family']})" for r in rows if r["ok"] is False]
