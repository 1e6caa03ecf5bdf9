"""The analysis commands' shared preamble (analysis.cli._Command): every output a command writes is checked as it
parses, before any work, so a file where a directory belongs (or a directory where a file belongs) is one line,
exit 2, and nothing written; the commands' results arguments and -v read alike."""

from __future__ import annotations

import pytest

from analysis.cli import (MANY_RESULTS, RESULTS, claims_main, collect_main, decide_main, fit_main, ladder_main,
                          lr_transfer_main, plot_main, report_main)


def _fails(capsys, main, args) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and captured.err.count("\n") == 1 and captured.out == "", captured
    return captured.err


@pytest.mark.parametrize("main, prog, holds", [
    (plot_main, "slm-plot", "the figures"), (report_main, "slm-report", "the report"),
    (ladder_main, "slm-ladder", "ladder.md and its figures"),
    (lr_transfer_main, "slm-lr-transfer", "lr_transfer.md and its figures"),
    (fit_main, "slm-fit", "fit.json and fit.png"),
])
def test_a_file_where_an_output_directory_belongs_is_one_line(tmp_path, capsys, main, prog, holds):
    table = tmp_path / "t.csv"
    table.write_text("run,status,val_nll\na,completed,3.0\n")
    taken = tmp_path / "taken"
    taken.write_text("keep me")
    err = _fails(capsys, main, [str(table), "-o", str(taken)])
    assert err == (f"{prog}: error: -o {taken}: exists and is not a directory; name a directory for {holds} (it is "
                   "created if missing)\n")
    assert taken.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "taken"]


@pytest.mark.parametrize("main, prog", [(claims_main, "slm-claims"), (decide_main, "slm-decide")])
def test_a_directory_where_an_output_file_belongs_is_one_line(tmp_path, capsys, main, prog):
    err = _fails(capsys, main, ["no_such_table.csv", "-o", str(tmp_path)])  # refused before the results are read
    assert err.startswith(f"{prog}: error: -o {tmp_path}: is a directory; name a file to write")


def test_collect_names_its_table_s_kind_then_refuses_a_directory(tmp_path, capsys):
    err = _fails(capsys, collect_main, [str(tmp_path), "-o", str(tmp_path / "t.txt")])
    assert err == f"slm-collect: error: --output {tmp_path / 't.txt'}: expected a .parquet or .csv file name\n"
    (tmp_path / "t.parquet").mkdir()
    err = _fails(capsys, collect_main, [str(tmp_path), "-o", str(tmp_path / "t.parquet")])
    assert err.startswith(f"slm-collect: error: --output {tmp_path / 't.parquet'}: is a directory")


@pytest.mark.parametrize("main, many", [(plot_main, False), (report_main, False), (ladder_main, False),
                                        (lr_transfer_main, True), (fit_main, True), (claims_main, True),
                                        (decide_main, True)])
def test_the_results_arguments_read_alike(capsys, main, many):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert (MANY_RESULTS if many else RESULTS) in text and ("results [results ...]" in text) == many
