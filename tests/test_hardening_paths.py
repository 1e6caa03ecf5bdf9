"""Hardening of where a run writes: run groups and job keys stay inside the runs directory, a runs
directory or data cache that cannot be written is one line, a refused single run leaves no run directory, and
top-level settings of the wrong kind are refused. Each case: one line `slm-train: error: ...`, exit 2, no
traceback, nothing written anywhere (the runs directory's parent included), for a single run and a sweep (-m).

Hydra runs in this process (tests/test_bad_input.py's helpers), so the battery takes seconds.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import yaml

from tests.test_bad_input import RUN, _train, snapshot, workdir  # noqa: F401 - workdir is a fixture

LONG = "x" * 300


def refused(capsys, argv, fragment) -> str:
    """Run slm-train; assert one error line holding `fragment`, exit 2, no traceback. Returns the line."""
    with pytest.raises(SystemExit) as exit_:
        _train(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exit_.value.code == 2, err
    assert "Traceback" not in err
    assert lines and lines[-1].startswith("slm-train: error: ") and fragment in lines[-1], lines[-1:]
    assert len([line for line in lines if ": error:" in line]) == 1, lines
    return lines[-1]


def everything(root: Path) -> dict:
    """snapshot() of the tests' shared parent less the data cache (tokenised once for all cases)."""
    return {k: v for k, v in snapshot(root).items() if "slm-cache" not in k.split(os.sep)[0]}


# ---------------------------------------------------------------- run groups stay inside the runs directory
GROUPS = [
    ("../../elsewhere", "a path, not a name"),
    ("../elsewhere", "a path, not a name"),
    ("{tmp}/abs", "a path, not a name"),
    ("a/b", "a path, not a name"),
    ("..", "outside the run groups"),
    (".", "outside the run groups"),
    ("", "the empty name"),
    ("' '", "the empty name"),
    ("null", "the empty name"),
    (".hidden", "hidden from slm-status"),
    (LONG, "300 bytes long, and a directory name may have at most 255"),
]


@pytest.mark.parametrize("sweep", [False, True], ids=["single", "sweep"])
@pytest.mark.parametrize("group, fragment", GROUPS, ids=[g[:12] or "empty" for g, _ in GROUPS])
def test_a_run_group_that_is_not_one_name_is_refused(workdir, capsys, group, fragment, sweep):
    group = group.replace("{tmp}", str(workdir))
    parent = workdir.parent
    before = everything(parent)
    line = refused(capsys, [*(["-m"] if sweep else []), *RUN, f"run_group={group}"], fragment)
    assert "run_group=" in line and "use one directory name" in line
    assert everything(parent) == before, "a refused run group wrote files"
    assert not (workdir / "runs").exists() and not (parent / "elsewhere").exists()


def test_a_run_group_set_in_a_sweep_file_is_checked(workdir, capsys, monkeypatch):
    """The check is on the config (conf/config.yaml's hydra.run.dir / hydra.sweep.dir), not on argv."""
    before = everything(workdir)
    refused(capsys, ["-m", "sweep=smoke", "run_group=../smoke", "hydra.sweeper.dry_run=true"], "a path, not a name")
    assert everything(workdir) == before


@pytest.mark.parametrize("override", ["+x=../../elsewhere", "+x=/etc/passwd", "+x=.", "+x=..", "~model.n_layers",
                                      "data.sources.0.paths=[../../a/b]", "+x=" + "/.." * 200])
def test_a_job_key_is_one_directory_name_inside_its_group(tmp_path, override):
    from slm.cli.job_keys import key_from_overrides

    key = key_from_overrides([override, "model=debug"])
    assert key not in ("", ".", "..") and "/" not in key and "\0" not in key and len(key.encode()) <= 255
    group = tmp_path / "runs" / "g"
    assert (group / key).resolve().parent == group.resolve()


# ---------------------------------------------------------------- a runs directory or cache that cannot be written
def _file(workdir: Path) -> Path:
    path = workdir / "afile"
    path.write_text("not a directory\n")
    return path


ENVS = [
    ("SLM_RUNS", lambda w: _file(w), "is a file; point it at a directory for the runs"),
    ("SLM_RUNS", lambda w: _file(w) / "runs", "is a file; point it at a directory for the runs"),
    ("SLM_CACHE", lambda w: _file(w), "is a file; point it at a directory for the data cache"),
    ("SLM_CACHE", lambda w: _file(w) / "cache", "is a file; point it at a directory for the data cache"),
    ("SLM_RUNS", lambda w: w / (("d" * 250 + "/") * 20), "File name too long"),
]


@pytest.mark.parametrize("sweep", [False, True], ids=["single", "sweep"])
@pytest.mark.parametrize("name, value, fragment", ENVS, ids=[f"{e[0]}-{i}" for i, e in enumerate(ENVS)])
def test_a_runs_directory_or_cache_that_is_not_a_directory(workdir, capsys, monkeypatch, name, value, fragment,
                                                           sweep):
    path = value(workdir)
    monkeypatch.setenv(name, str(path))
    before = everything(workdir)
    line = refused(capsys, [*(["-m"] if sweep else []), *RUN], fragment)
    assert f"{name}=" in line
    assert everything(workdir) == before


def test_a_data_cache_dir_that_is_a_file(workdir, capsys):
    path = _file(workdir)
    before = everything(workdir)
    refused(capsys, [*RUN, f"data.cache_dir={path}"], f"data.cache_dir={path}: {path} is a file")
    assert everything(workdir) == before


def test_a_run_group_that_is_a_file(workdir, capsys):
    (workdir / "runs").mkdir()
    (workdir / "runs" / "train").write_text("a file where the run group goes\n")
    before = everything(workdir)
    line = refused(capsys, RUN, f"cannot write {workdir / 'runs' / 'train'}")
    assert "SLM_RUNS=" in line
    assert everything(workdir) == before


@pytest.mark.parametrize("name", ["SLM_RUNS", "SLM_CACHE"])
def test_a_read_only_runs_directory_or_cache(workdir, capsys, monkeypatch, name):
    """A read-only filesystem: os.access(W_OK) is False (EROFS) even for root; here os.access says so for the
    directory, as a read-only mount would (tests run as root, where permission bits are not enforced)."""
    target = workdir / name.lower()
    target.mkdir()
    monkeypatch.setenv(name, str(target))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == target and mode & os.W_OK
                        else real_access(p, mode, **kw))
    before = everything(workdir)
    line = refused(capsys, RUN, f"{target} is not writable (read-only); point it at a writable directory")
    assert line.startswith(f"slm-train: error: {name}={target}: ")
    assert everything(workdir) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a chmod 555 directory")
def test_a_read_only_runs_directory_by_permissions(workdir, capsys, monkeypatch):
    target = workdir / "ro"
    target.mkdir()
    target.chmod(0o555)
    monkeypatch.setenv("SLM_RUNS", str(target))
    try:
        refused(capsys, RUN, "is not writable (read-only)")
        assert not any(target.iterdir())
    finally:
        target.chmod(0o755)


@pytest.mark.parametrize("code, fragment", [(errno.EROFS, "Read-only file system"),
                                            (errno.ENAMETOOLONG, "File name too long")])
def test_a_path_error_while_the_run_directory_is_made_is_one_line(workdir, capsys, monkeypatch, code, fragment):
    """An OSError of a path that passes the checks and still cannot be written (a race, a mount): one line."""
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if "runs" in self.parts:
            raise OSError(code, os.strerror(code), str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    line = refused(capsys, RUN, fragment)
    assert "cannot write " in line and str(workdir / "runs") in line


# ---------------------------------------------------------------- a refused single run leaves no run directory
def test_a_refused_single_run_leaves_no_run_directory(workdir, capsys):
    """Refused by its data after its record was written (5 bytes of text, less than one window)."""
    (workdir / "tiny.txt").write_text("abcd\n")
    argv = [*RUN, "data=local", f"data.sources.0.paths=[{workdir}/tiny.txt]"]
    refused(capsys, argv, "source 'local' has 5 training tokens")
    group = workdir / "runs" / "train"
    assert not group.exists() or not any(group.iterdir()), list(group.iterdir())


def test_a_bad_checkpoint_choice_is_refused_before_the_run_directory(workdir, capsys):
    before = everything(workdir)
    refused(capsys, [*RUN, "bad_checkpoint=bogus"], "bad_checkpoint='bogus' is invalid: choose one of: fail, "
            "previous, restart")
    assert everything(workdir) == before and not (workdir / "runs").exists()


def _run_dir(workdir: Path, argv: list[str]) -> Path:
    from slm.cli.job_keys import key_from_overrides

    exclude = yaml.safe_load(Path("conf/config.yaml").read_text() if Path("conf/config.yaml").exists() else
                             (Path(__file__).parents[1] / "conf" / "config.yaml").read_text())
    keys = exclude["hydra"]["job"]["config"]["override_dirname"]["exclude_keys"]
    return workdir / "runs" / "train" / key_from_overrides(argv, keys)


def test_a_refused_run_keeps_what_was_recorded_before(workdir, capsys):
    """A run directory with a record from an earlier attempt is not removed by a refused one, nor its record
    changed beyond the new failure."""
    (workdir / "tiny.txt").write_text("abcd\n")
    argv = [*RUN, "data=local", f"data.sources.0.paths=[{workdir}/tiny.txt]"]
    run_dir = _run_dir(workdir, argv)
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_text(json.dumps({"schema_version": 1, "status": "failed", "error": "earlier"}))
    (run_dir / "notes.txt").write_text("mine\n")
    refused(capsys, argv, "source 'local' has 5 training tokens")
    assert (run_dir / "notes.txt").read_text() == "mine\n"
    assert json.loads((run_dir / "result.json").read_text())["status"] == "failed"


def test_discard_refused_keeps_a_run_that_trained(tmp_path):
    from slm.cli.config import USER_ERRORS
    from slm.runs.refused import discard_refused

    def discard(**kwargs) -> bool:
        return discard_refused(str(run_dir), ValueError("refused"), bad_input=USER_ERRORS, **kwargs)

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "result.json").write_text(json.dumps({"schema_version": 1, "status": "failed", "error": "x"}))
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"state")
    assert not discard(fresh=True) and (run_dir / "checkpoints" / "last.ckpt").exists()
    (run_dir / "checkpoints" / "last.ckpt").unlink()
    (run_dir / "train.log").write_text("log\n")
    assert not discard(fresh=False) and run_dir.exists()  # its record was there before this attempt
    assert discard(fresh=True) and not run_dir.exists()


# ---------------------------------------------------------------- top-level settings of the wrong kind
SETTINGS = [
    ("rerun_failed=maybe", "rerun_failed='maybe' is invalid: expected true or false"),
    ("rerun_failed=1", "rerun_failed=1 is invalid: expected true or false"),
    ("rerun_failed=null", "rerun_failed=None is invalid: expected true or false"),
    ("bad_checkpoint=bogus", "bad_checkpoint='bogus' is invalid: choose one of: fail, previous, restart"),
    ("bad_checkpoint=1", "bad_checkpoint=1 is invalid: choose one of"),
    ("+foo=1", "+foo: there is no top-level setting 'foo'; the settings are: model, tokenizer, data, train, eval"),
    ("+trian.lr=1", "+trian: there is no top-level setting 'trian' (did you mean train?)"),
    ("++run_grop=x", "(did you mean run_group?)"),
]


@pytest.mark.parametrize("sweep", [False, True], ids=["single", "sweep"])
@pytest.mark.parametrize("override, fragment", SETTINGS, ids=[s[0] for s in SETTINGS])
def test_a_top_level_setting_of_the_wrong_kind_is_refused(workdir, capsys, override, fragment, sweep):
    before = everything(workdir)
    refused(capsys, [*(["-m"] if sweep else []), *RUN, override], fragment)
    assert everything(workdir) == before and not (workdir / "runs").exists()


def test_an_unknown_key_in_one_sweep_job_is_recorded_failed_with_its_line(workdir, capsys):
    """`-m +foo=1,2`: each job is invalid, recorded failed with the refusal's own line (no OmegaConf wrapper)."""
    with pytest.raises(SystemExit) as exit_:
        _train(["-m", *RUN, "+foo=1,2"])
    assert exit_.value.code == 1
    records = sorted((workdir / "runs" / "train").glob("*/result.json"))
    assert len(records) == 2
    for path in records:
        record = json.loads(path.read_text())
        assert record["status"] == "failed"
        assert record["error"].startswith("SettingError: +foo: there is no top-level setting 'foo'"), record["error"]
    assert "checkpoints" not in {p.name for r in records for p in r.parent.iterdir()}
