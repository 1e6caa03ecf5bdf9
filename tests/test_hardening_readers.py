"""Damaged files under the analysis commands: every reader (results tables, per-document files and result.json
under slm-compare, fit.json under slm-plan, result.json and multirun.yaml under slm-collect) x every kind of
damage (not UTF-8, truncated or invalid, the wrong shape, empty, a directory, unreadable, not a table) is one
line naming the file and what is wrong, exit 2, no traceback; or, where the design skips a damaged record and
carries on (slm-collect), one warning line naming it. Plus slm-fit's checks of the values it fits. In-process.

As root every file is readable whatever its mode: there the "no permission" cases make the OS's refusal
(PermissionError from pathlib) for that one file, as a non-root user gets it from chmod 0."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import cli
from analysis.fit import FitError, fit_data
from tests.test_analysis_collect import make_record, write
from tests.test_analysis_paired import DOCS, _acc, _run


def _refuse(path: Path, monkeypatch) -> None:
    """chmod 0, and as root (who reads it anyway) pathlib's reads of this file refused as chmod 0 refuses others."""
    path.chmod(0)
    if os.geteuid() != 0:
        return
    target = os.path.abspath(path)
    for name in ("read_bytes", "read_text"):
        real = getattr(Path, name)

        def refused(self, *args, _real=real, **kwargs):
            if os.path.abspath(self) == target:
                raise PermissionError(13, "Permission denied", str(self))
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(Path, name, refused)


def _directory(path: Path, monkeypatch) -> None:
    path.unlink()
    path.mkdir()


def _text(content: str | bytes):
    return lambda path, monkeypatch: (path.write_bytes(content) if isinstance(content, bytes)
                                      else path.write_text(content))


def _cut(path: Path, monkeypatch) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


NOT_UTF8 = (_text(b"\xff\xfe\x00\x01garbage\n"), "not UTF-8 text (byte 0xff at offset 0)")
EMPTY = (_text(b""), "empty file")
DIRECTORY = (_directory, "cannot read it (Is a directory)")
UNREADABLE = (_refuse, "cannot read it (Permission denied)")


def _fails(main, argv: list[str], capsys, path: Path, fragment: str | None, prog: str) -> str:
    """main(argv) exits 2 with one line, `<prog>: error: ...`, naming `path` and holding `fragment`."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"{prog}: error: ") and "Traceback" not in err, err
    assert str(path) in err, err
    assert fragment is None or fragment in err, err
    return err


# ============================================================================================ results tables
@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> Path:
    """results.parquet and results.csv from slm-collect over two runs."""
    root = tmp_path_factory.mktemp("tables")
    sweep = root / "runs" / "grid"
    write(sweep / "model.n_layers=4", make_record())
    write(sweep / "model.n_layers=6", make_record(n_layers=6, val_nll=2.9))
    for suffix in ("parquet", "csv"):
        cli.collect_main([str(sweep), "-o", str(root / f"results.{suffix}")])
    return root


def _column_text(path: Path, monkeypatch) -> None:
    table = pd.read_csv(path)
    table["val_nll"] = table["val_nll"].astype(object)
    table.loc[1, "val_nll"] = "abc"
    table.to_csv(path, index=False)


# (suffix, damage) -> (how, a fragment of the message; None: the command's own words, the file named)
TABLE_DAMAGES = {
    ("parquet", "garbage"): (_text(b"\x00\x01\xffnot parquet at all" * 4), "not a parquet file (Parquet magic bytes"),
    ("parquet", "truncated"): (_cut, "not a parquet file ("),
    ("parquet", "a CSV inside"): (_text("run,status,val_nll\na,completed,3.0\n"), "not a parquet file ("),
    ("parquet", "empty"): EMPTY,
    ("parquet", "no permission"): UNREADABLE,
    ("parquet", "a directory"): (_directory, "no runs in it (no result.json files and no Hydra job folders"),
    ("csv", "not UTF-8"): NOT_UTF8,
    ("csv", "empty"): EMPTY,
    ("csv", "no permission"): UNREADABLE,
    ("csv", "unparseable"): (_text('run,status,val_nll\n"a,completed,3.0\n'), "not a CSV table"),
    ("csv", "wrong columns"): (_text("a,b\n1,2\n"), None),
    ("csv", "text in a number column"): (_column_text, 'column val_nll: run model.n_layers=6 has "abc", not a number'),
    ("json", "an object"): (_text('{"run": "a", "status": "completed"}'),
                            "not a results table (an array of row objects) but an object"),
    ("json", "truncated"): (_text('[{"run": "a", "status": '), "not valid JSON (Expecting value"),
    ("json", "not UTF-8"): NOT_UTF8,
}
TABLE_COMMANDS = {
    "slm-report": (cli.report_main, ["-o", "{out}"]),
    "slm-plot": (cli.plot_main, ["--kind", "pareto", "-o", "{out}"]),
    "slm-fit": (cli.fit_main, ["-o", "{out}", "--bootstrap", "0"]),
    "slm-claims": (cli.claims_main, []),
    "slm-ladder": (cli.ladder_main, ["-o", "{out}"]),
    "slm-lr-transfer": (cli.lr_transfer_main, ["-o", "{out}"]),
    "slm-plan": (cli.plan_main, None),  # runs=<table>: the MFU measured there
}
DESIGNED = {("slm-plan", "wrong columns"), ("slm-plan", "a directory")}
"""slm-plan takes a table without an MFU column, or a directory without runs, as no measured MFU (and says so)."""


@pytest.mark.parametrize("prog", list(TABLE_COMMANDS))
@pytest.mark.parametrize("damage", list(TABLE_DAMAGES), ids=[f"{s}-{d}" for s, d in TABLE_DAMAGES])
def test_a_damaged_results_table_is_one_line_naming_it(tables, tmp_path, capsys, monkeypatch, prog, damage):
    if (prog, damage[1]) in DESIGNED:
        pytest.skip("designed: no measured MFU")
    suffix, _ = damage
    path = tmp_path / f"results.{suffix}"
    if suffix == "json":
        path.write_text("[]")
    else:
        shutil.copy(tables / f"results.{suffix}", path)
    make, fragment = TABLE_DAMAGES[damage]
    make(path, monkeypatch)
    main, argv = TABLE_COMMANDS[prog]
    argv = ["gpu_hours=1", "gpu=h100", f"runs={path}"] if argv is None else \
        [str(path), *(a.format(out=tmp_path / "out") for a in argv)]
    _fails(main, argv, capsys, path, fragment, prog)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.*"))  # nothing written


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_the_undamaged_tables_load(tables, capsys, suffix):
    cli.claims_main([str(tables / f"results.{suffix}")])
    assert "| claim |" in capsys.readouterr().out


# ============================================================================ slm-compare: per-document files
def _line(content: dict | list | str):
    return _text((content if isinstance(content, str) else json.dumps(content)) + "\n")


DOCUMENT_DAMAGES = {
    "not UTF-8": NOT_UTF8,
    "empty": EMPTY,
    "a directory": DIRECTORY,
    "no permission": UNREADABLE,
    "truncated": (_line('{"task": "mc", "doc'), "line 1 is not a per-document line: not valid JSON (Unterminated"),
    "a line that is a list": (_line([1, 2]), "line 1 is not a per-document line (a JSON object with a task name)"),
    "metrics a list": (_line({"task": "mc", "metrics": ["acc,none"]}), 'line 1: "metrics" is ["acc,none"], not an '
                                                                       "object of metric"),
    "group a string": (_line({"task": "g", "group": "mc"}), 'line 1: "group" is "mc", not a list of task names'),
    "a string for a number": (None, 'task mc doc_id 1: acc,none is "yes", not a number or [log-likelihood, count]'),
    "a doc_id that is a list": (None, "line 3: doc_id is an array, not a number or a string"),
}


@pytest.fixture
def pair(tmp_path) -> tuple[Path, Path]:
    """Two runs with per-document results of one task."""
    return _run(tmp_path / "a", {"mc": _acc([1, 0, 0, 1])}), _run(tmp_path / "b", {"mc": _acc([1, 1, 0, 1])})


def _edit_line(path: Path, number: int, **fields) -> None:
    lines = path.read_text().splitlines()
    lines[number - 1] = json.dumps({**json.loads(lines[number - 1]), **fields})
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("damage", list(DOCUMENT_DAMAGES))
def test_a_damaged_per_document_file_is_one_line_naming_it(pair, capsys, monkeypatch, damage):
    a, b = pair
    path = b / DOCS
    make, fragment = DOCUMENT_DAMAGES[damage]
    if damage == "a string for a number":
        _edit_line(path, 3, **{"acc,none": "yes"})  # line 1: the task's metrics; 2: doc 0; 3: doc 1
    elif damage == "a doc_id that is a list":
        _edit_line(path, 3, doc_id=[1])
    else:
        make(path, monkeypatch)
    _fails(cli.compare_main, [str(a), str(b)], capsys, path, fragment, "slm-compare")


RECORD_DAMAGES = {
    "not UTF-8": (_text(b"\x89PNG\r\n\x1a\n\xff"), "not UTF-8 text"),
    "empty": EMPTY,
    "truncated": (_text('{"status": "completed", "eval": '), "not valid JSON"),
    "a list": (_text("[1, 2]"), "not a JSON object but an array"),
    "a directory": DIRECTORY,
    "no permission": UNREADABLE,
    "lm_eval a list": (None, "eval.lm_eval is an array, not an object"),
    "metrics a string": (None, "eval.lm_eval.metrics is a string, not an object"),
}


@pytest.mark.parametrize("damage", list(RECORD_DAMAGES))
def test_a_damaged_result_json_under_slm_compare_is_one_line_naming_it(pair, capsys, monkeypatch, damage):
    a, b = pair
    path = b / "result.json"
    make, fragment = RECORD_DAMAGES[damage]
    record = json.loads(path.read_text())
    if damage == "lm_eval a list":
        path.write_text(json.dumps({**record, "eval": {"lm_eval": [1]}}))
    elif damage == "metrics a string":
        record["eval"]["lm_eval"]["metrics"] = "acc"
        path.write_text(json.dumps(record))
    else:
        make(path, monkeypatch)
    _fails(cli.compare_main, [str(a), str(b)], capsys, path, fragment, "slm-compare")


def test_the_undamaged_pair_compares(pair, capsys):
    cli.compare_main([str(p) for p in pair])
    assert "McNemar" in capsys.readouterr().out


# ===================================================================================== slm-plan: fit.json
FIT = {"kind": "slm-fit", "version": 1, "N": "params_non_embedding", "flops_per_param_token": 6.0, "data": [],
       "approach3": {"constants": {"E": 1.8, "A": 400.0, "B": 400.0, "alpha": 0.34, "beta": 0.28},
                     "samples": {"E": [1.8] * 12, "A": [400.0] * 12, "B": [400.0] * 12, "alpha": [0.34] * 12,
                                 "beta": [0.28] * 12}}}


def _fit(**changes):
    def make(path, monkeypatch):
        content = json.loads(json.dumps(FIT))
        for dotted, value in changes.items():
            *parents, leaf = dotted.split("__")
            node = content
            for key in parents:
                node = node[key]
            node[leaf] = value
        path.write_text(json.dumps(content))
    return make


FIT_DAMAGES = {
    "not UTF-8": NOT_UTF8,
    "empty": EMPTY,
    "truncated": (_text('{"kind": "slm-fit", "approach3": {'), "not valid JSON"),
    "a directory": DIRECTORY,
    "no permission": UNREADABLE,
    "a list": (_text("[1, 2]"), "not an object but an array"),
    "another JSON file": (_text('{"status": "completed"}'), "not a fit.json written by slm-fit"),
    "constants a list": (_fit(approach3__constants=[1, 2]), "approach3.constants is [1, 2], not an object with E, A"),
    "a constant a string": (_fit(approach3__constants__E="1.8"), 'approach3.constants.E is "1.8", not a finite number'),
    "a constant null": (_fit(approach3__constants__alpha=None), "approach3.constants.alpha is null, not a finite"),
    "samples a string": (_fit(approach3__samples__beta="x"), 'approach3.samples.beta is "x", not a list of numbers'),
    "a sample a string": (_fit(approach3__samples__A=[1.0, "x"]), "approach3.samples.A is [1.0, \"x\"], not a list"),
    "flops per token negative": (_fit(flops_per_param_token=-6), "flops_per_param_token is -6, not a positive"),
}


@pytest.mark.parametrize("damage", list(FIT_DAMAGES))
def test_a_damaged_fit_json_under_slm_plan_is_one_line_naming_it(tmp_path, capsys, monkeypatch, damage):
    path = tmp_path / "fit" / "fit.json"
    path.parent.mkdir()
    path.write_text(json.dumps(FIT))
    make, fragment = FIT_DAMAGES[damage]
    make(path, monkeypatch)
    _fails(cli.plan_main, ["flops=1e21", "params=4e7", f"fit={path.parent}"], capsys, path, fragment, "slm-plan")


def test_the_undamaged_fit_json_plans(tmp_path, capsys):
    (tmp_path / "fit.json").write_text(json.dumps(FIT))
    cli.plan_main(["flops=1e21", "params=4e7", f"fit={tmp_path}"])
    assert "your fit" in capsys.readouterr().out


# ======================================================== slm-collect: a damaged record is named and skipped
def _record(**changes):
    def make(record: dict) -> dict:
        for dotted, value in changes.items():
            *parents, leaf = dotted.split("__")
            node = record
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = value
        return record
    return make


COLLECT_DAMAGES = {
    "val_nll a string": ("result.json", _record(eval__val_nll="abc"), 'eval.val_nll is "abc", not a number'),
    "tokens a list": ("result.json", _record(training__tokens=[1]), "training.tokens is [1], not a number"),
    "seed a string": ("result.json", _record(config__train__seed="x"), 'config.train.seed is "x", not an integer'),
    "error a list": ("result.json", _record(error=["x"]), 'error is ["x"], not a string'),
    "a score an object": ("result.json", _record(eval__lm_eval={"scores": {"mc": {"acc": 1}}}),
                          'eval.lm_eval.scores.mc is {"acc": 1}, not a number'),
    "n_layers a string": ("result.json", _record(model__n_layers="four"),
                          'n_layers is "four" where 1 other run has a number'),
    "multirun.yaml empty": ("multirun.yaml", b"", "empty file"),
    "multirun.yaml unreadable": ("multirun.yaml", _refuse, "cannot read it (Permission denied)"),
}


@pytest.mark.parametrize("damage", list(COLLECT_DAMAGES))
def test_slm_collect_names_a_damaged_file_in_one_warning_and_keeps_the_good_run(tmp_path, capsys, monkeypatch,
                                                                                damage):
    name, make, fragment = COLLECT_DAMAGES[damage]
    sweep = tmp_path / "runs" / "grid"
    write(sweep / "good", make_record())
    if name == "result.json":
        write(sweep / "bad", make(make_record(n_layers=6)))
        path = sweep / "bad" / "result.json"
    else:
        path = sweep / name
        path.write_text("hydra: {}\n")
        make(path, monkeypatch) if callable(make) else path.write_bytes(make)
    out = tmp_path / "results.parquet"
    cli.collect_main([str(sweep), "-o", str(out)])
    printed = capsys.readouterr()
    assert printed.err.count("\n") == 1 and "Traceback" not in printed.err, printed.err
    assert printed.err.startswith(f"slm-collect: warning: cannot read {path}") and fragment in printed.err, printed.err
    assert "1 run (1 completed)" in printed.out and pd.read_parquet(out)["run"].tolist() == ["good"]


# ============================================================================ slm-fit: the values it fits
def _runs(**column) -> pd.DataFrame:
    n = 7
    table = pd.DataFrame({"run": [f"r{i}" for i in range(n)], "status": "completed",
                          "val_nll": [3.0 - 0.1 * i for i in range(n)],
                          "params_non_embedding": [1e5 * 2 ** i for i in range(n)],
                          "tokens": [1e6 * 1.5 ** i for i in range(n)]})
    for name, values in column.items():
        table[name] = values
    return table


FIT_VALUES = {
    "val_nll negative": (dict(val_nll=-1.0), "7 runs have val_nll <= 0: r0, r1, r2, r3, r4, ... (2 more)"),
    "val_nll zero": (dict(val_nll=[0.0] * 2 + [3.0] * 5), "2 runs have val_nll <= 0: r0, r1"),
    "val_nll NaN": (dict(val_nll=[np.nan] * 2 + [3.0] * 5), "2 runs have val_nll missing or NaN: r0, r1"),
    "one of each": (dict(val_nll=[-1.0, np.nan, np.inf, 3.0, 3.0, 3.0, 3.0], tokens=[1e6] * 6 + [0]),
                    "1 run has val_nll missing or NaN: r1; 1 run has val_nll infinite: r2; 1 run has val_nll <= 0: "
                    "r0; 1 run has tokens <= 0: r6"),
    "val_nll infinite": (dict(val_nll=[np.inf, -np.inf] + [3.0] * 5), "2 runs have val_nll infinite: r0, r1"),
    "tokens negative": (dict(tokens=[-1e6] * 7), "7 runs have tokens <= 0"),
    "params zero": (dict(params_non_embedding=[0] * 7), "7 runs have params_non_embedding <= 0"),
}


@pytest.mark.parametrize("case", list(FIT_VALUES))
def test_slm_fit_says_which_values_it_cannot_fit(tmp_path, capsys, case):
    column, fragment = FIT_VALUES[case]
    path = tmp_path / "results.csv"
    _runs(**column).to_csv(path, index=False)
    err = _fails(cli.fit_main, [str(path), "-o", str(tmp_path / "fit"), "--bootstrap", "0"], capsys, path, fragment,
                 "slm-fit")
    assert "L(N, D) = E + A / N^alpha + B / D^beta needs val_nll, params_non_embedding and tokens finite and > 0" in err
    assert not (tmp_path / "fit").exists()


def test_fit_data_names_text_where_a_number_belongs_and_a_missing_column():
    with pytest.raises(FitError, match=r"2 runs have val_nll not a number: r0, r1"):
        fit_data(_runs(val_nll=["x", "y"] + [3.0] * 5))
    with pytest.raises(FitError, match="the results have no tokens column"):
        fit_data(_runs().drop(columns=["tokens"]))


def test_a_fit_whose_exponents_are_both_zero_is_written_without_an_optimum(tmp_path, capsys):
    """Losses that depend on neither N nor D: alpha = beta = 0, no compute-optimal split (a and b null)."""
    path = tmp_path / "results.csv"
    _runs(val_nll=3.0).to_csv(path, index=False)
    cli.fit_main([str(path), "-o", str(tmp_path / "fit"), "--bootstrap", "0"])
    content = json.loads((tmp_path / "fit" / "fit.json").read_text())
    assert content["approach3"]["constants"]["alpha"] == content["approach3"]["constants"]["beta"] == 0
    assert content["approach3"]["a"] is None and content["approach3"]["b"] is None
    assert "a = beta/(alpha+beta)            n/a" in capsys.readouterr().out
