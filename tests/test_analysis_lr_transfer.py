"""slm-lr-transfer: the best lr per shape and parametrization, how far it moves, edges flagged, seeds pooled."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.cli import lr_transfer_main
from analysis.lr_transfer import lr_curves, optima, shifts, write
from tests.test_analysis_collect import make_record, write as write_record

LRS = [2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3]


def _loss(lr: float, best: float, seed: int = 0) -> float:
    """A bowl in log2(lr) around `best` (plus a seed's offset)."""
    return 2.0 + 0.05 * (math.log2(lr) - math.log2(best)) ** 2 + 0.001 * seed


def _table(seeds=(0,)) -> pd.DataFrame:
    rows = []
    for width in (32, 64, 128, 256):
        for lr in LRS:
            for seed in seeds:
                # sp: the optimum halves with every doubling of width; mup: it stays at 2e-3
                sp_best = 4e-3 * 64 / width
                rows.append({"sweep": "w", "parametrization": "sp", "d_model": width, "n_layers": 4, "lr": lr,
                             "seed": seed, "status": "completed", "val_nll": _loss(lr, sp_best, seed)})
                rows.append({"sweep": "w", "parametrization": "mup", "d_model": width, "n_layers": 4, "lr": lr,
                             "seed": seed, "status": "completed", "val_nll": _loss(lr, 2e-3, seed)})
    return pd.DataFrame(rows)


def test_optima_and_how_far_they_move():
    best = optima(lr_curves(_table()))
    sp = best[best["parametrization"] == "sp"].set_index("shape")
    mup = best[best["parametrization"] == "mup"].set_index("shape")
    assert list(sp["best_lr"]) == [8e-3, 4e-3, 2e-3, 1e-3] and list(mup["best_lr"]) == [2e-3] * 4
    assert sp.loc[32, "edge"] and not sp.loc[64, "edge"]  # 8e-3 is the grid's largest: maybe beyond
    assert mup["lr_estimate"].to_numpy() == pytest.approx([2e-3] * 4)  # the parabola finds the exact vertex
    moves = shifts(best).set_index("parametrization")
    assert moves.loc["sp", "grid_factor"] == 8 and moves.loc["sp", "trend"] == "down" and moves.loc["sp", "edges"] == 1
    assert moves.loc["mup", "grid_factor"] == 1 and moves.loc["mup", "trend"] == "flat"


def test_seeds_are_pooled_and_a_failed_point_is_infinitely_bad():
    table = _table(seeds=(0, 1))
    curves = lr_curves(table)
    assert set(curves["seeds"]) == {2} and len(curves) == 2 * 4 * len(LRS)
    point = curves[(curves["parametrization"] == "mup") & (curves["shape"] == 64) & (curves["lr"] == 2e-3)]
    assert point["loss"].item() == pytest.approx(2.0005) and point["loss_std"].item() > 0
    at = (table["parametrization"] == "mup") & (table["d_model"] == 64) & (table["lr"] == 2e-3) & (table["seed"] == 1)
    table.loc[at, "status"], table.loc[at, "val_nll"] = "diverged", np.nan
    best = optima(lr_curves(table)).set_index(["parametrization", "shape"])
    assert best.loc[("mup", 64), "best_lr"] != 2e-3  # a point with a diverged seed is not the optimum


def test_write_and_the_command(tmp_path, capsys):
    path = write(_table(), tmp_path / "out")
    text = path.read_text()
    assert "| sp | 32 | 0.008 |" in text and "edge" in text and "8.00x" in text
    assert (tmp_path / "out" / "figures" / "lr_transfer_w.png").stat().st_size > 10_000
    runs = tmp_path / "runs" / "lrt"
    for i, (width, lr) in enumerate((w, lr) for w in (32, 64) for lr in LRS):
        record = make_record(d_model=width, val_nll=_loss(lr, 1e-3))
        record["config"]["train"]["lr"] = lr
        record["model"]["parametrization"] = "mup"
        write_record(runs / f"job{i}", record)
    lr_transfer_main([str(runs), "-o", str(tmp_path / "cli")])
    assert "| mup | 32 | 0.001 |" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        lr_transfer_main([str(runs / "job0"), "-o", str(tmp_path / "bad")])  # one run: no lr study in it
    assert exit_.value.code == 2
    assert "no learning-rate study" in capsys.readouterr().err
