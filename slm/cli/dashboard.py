"""`slm-dashboard <sweep dir or storage> [--host H] [--port P]`: an Optuna study live in the browser (optuna-dashboard).

    slm-dashboard runs/lr_search                  # a hydra/sweeper=optuna sweep: http://127.0.0.1:8080/dashboard/...
    slm-dashboard lr_search --port 8081           # a run group under $SLM_RUNS (default runs/)
    slm-dashboard runs/lr_search/optuna.journal   # a journal file, a SQLite file, or an RDB URL (postgresql://...)
    ssh -L 8080:localhost:8080 login              # on a cluster, slm-dashboard on the login node: this on your machine

A sweep directory's study is found as the sweeper finds it: the storage its saved config names (hydra.sweeper.storage in
multirun.yaml), else the SQLite optuna.db of a study begun there, else the journal file optuna.journal. The command
prints one line, the URL and the studies, and serves optuna-dashboard's page (its trials, the history and intermediate
values plots, pruned trials as such) until Ctrl-C, reading the storage as the study runs. It is read-only: slm's
sweeper owns the study, so a request that would change it (delete a study, tell a trial, a note) is refused unless
--writable.
"""

from __future__ import annotations

import errno
import json
import socket
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from slm.bad_input import describe, doc_parser, fail, whole_number
from slm.cli.paths import resolve_path
from slm.pipes import quiet_on_closed_pipe

PROG = "slm-dashboard"
JOURNAL, SQLITE, SAVED_CONFIG = "optuna.journal", "optuna.db", "multirun.yaml"  # as slm.sweeps.study_files reads them
ALLOWED = (f"a sweep directory of hydra/sweeper=optuna (with {JOURNAL}, {SQLITE}, or hydra.sweeper.storage in its "
           f"{SAVED_CONFIG}), a journal or SQLite file, or an RDB URL")
READS = ("GET", "HEAD", "OPTIONS")


@dataclass
class Found:
    """A study's storage: `storage` as slm.training.trial_link.open_storage takes it (a journal file's path or a URL),
    `study` the study the sweep names (None: any), `where` what named the storage."""

    storage: str
    study: str | None
    where: str


def _is_sqlite(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(16) == b"SQLite format 3\x00"


def _file_storage(path: Path, study: str | None, where: str) -> Found:
    """A storage file: SQLite by its header, else a journal (whose first line, if any, is one of Optuna's records:
    its reader would skip any other line and show an empty storage)."""
    path = path.resolve()
    if _is_sqlite(path):
        return Found(f"sqlite:///{path}", study, where)
    with open(path, "rb") as f:
        first = f.readline()
    try:
        record = json.loads(first) if first.strip() else {"op_code": None}
    except ValueError:
        record = None
    if not isinstance(record, dict) or "op_code" not in record:
        fail(PROG, f"{path} (from {where}) is neither an Optuna journal nor a SQLite file; give {ALLOWED}")
    return Found(str(path), study, where)


def find_storage(arg: str) -> Found:
    """The storage `arg` names (see the module's docstring); one line and exit 2 where it names none."""
    if "://" in arg:
        return Found(arg, None, "the command line")
    path = resolve_path(arg, PROG, what="sweep directory or study storage")
    if path.is_file():
        return _file_storage(path, None, "the command line")
    from slm.sweeps.study_files import NoStudy, study_storage

    try:
        storage, study, where = study_storage(path)  # the sweeper's own order (slm.sweeps.study_files)
    except NoStudy as err:
        fail(PROG, f"{err}; give {ALLOWED} (a grid sweep's curves: tensorboard --logdir {path}, docs/sweeps.md)")
    if "://" in storage:
        return Found(storage, study, where)
    if not Path(storage).is_file():
        fail(PROG, f"{arg}: {where} names {storage}, which does not exist (a relative path is read from the current "
             "directory, as the sweeper did): run slm-dashboard where the sweep was started, or give the storage")
    return _file_storage(Path(storage), study, where)


def open_found(found: Found):
    """The Optuna storage and its studies ([(study id, name, trials by state)]); one line and exit 2 where it cannot be
    read or holds no study."""
    import optuna

    from slm.training.trial_link import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if found.storage.startswith("sqlite:///") and not Path(found.storage.removeprefix("sqlite:///")).is_file():
        fail(PROG, f"{found.storage}: no such SQLite file; give {ALLOWED}")
    try:
        storage = open_storage(found.storage)
        if isinstance(storage, str):
            storage = optuna.storages.RDBStorage(storage, skip_compatibility_check=False, skip_table_creation=True)
        studies = [(s._study_id, s.study_name, Counter(t.state.name.lower() for t in
                                                       storage.get_all_trials(s._study_id, deepcopy=False)))
                   for s in storage.get_all_studies()]
    except Exception as err:  # a file that is not a journal, a server that does not answer: say which and why
        fail(PROG, f"{found.storage} (from {found.where}): not readable as an Optuna study's storage: {describe(err)}")
    if not studies:
        fail(PROG, f"{found.storage} (from {found.where}) holds no Optuna study yet; give {ALLOWED}")
    return storage, studies


def summary(url: str, found: Found, studies: list) -> str:
    """The one line: the URL (of the sweep's own study where the storage holds it), the studies and their trials."""
    own = [s for s in studies if s[1] == found.study] or (studies if len(studies) == 1 else [])
    link = f"{url}/dashboard/studies/{own[0][0]}" if own else f"{url}/dashboard"
    shown = own or studies
    names = "; ".join(f"study {name} ({sum(states.values())} trials"
                      + "".join(f"{': ' if i == 0 else ', '}{n} {state}" for i, (state, n) in enumerate(states.items()))
                      + ")" for _, name, states in shown[:5])
    more = f"; {len(studies) - len(shown[:5])} more studies" if len(studies) > len(shown[:5]) else ""
    return f"{PROG}: {link}  {names}{more}, in {found.storage}; Ctrl-C stops it"


def read_only(app):
    """The WSGI app with every request but a read (GET, HEAD, OPTIONS) refused: 403 and a JSON reason."""

    def guarded(environ, start_response):
        if environ.get("REQUEST_METHOD", "GET") in READS:
            return app(environ, start_response)
        body = json.dumps({"reason": f"{PROG} is read-only: slm's sweeper owns the study; start it with "
                                     "--writable to change the study from the page"}).encode()
        start_response("403 Forbidden", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return guarded


class _Server(ThreadingMixIn, WSGIServer):
    """wsgiref's server, a thread per request (as optuna-dashboard's own CLI serves), threads not waited for."""

    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args) -> None:  # no line per request: the page polls the study every few seconds
        pass


def listen(host: str, port: int, app) -> WSGIServer:
    """A server bound to host:port; one line and exit 2 where it cannot bind."""
    server_class = _Server
    if ":" in host:  # an IPv6 address
        server_class = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
    try:
        return make_server(host, port, app, server_class=server_class, handler_class=_Quiet)
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            fail(PROG, f"--port {port} is in use: give a free port, e.g. --port {port + 1 if port < 65535 else 8081}, "
                 "or --port 0 for any free one")
        fail(PROG, f"--host {host} --port {port}: cannot listen there ({describe(err)}): give an address of this "
             "machine (127.0.0.1: this machine only; 0.0.0.0: every interface) and a free port from 1024 to 65535")


def run(argv: list[str]) -> None:
    parser = doc_parser(PROG, __doc__, examples=1)
    parser.add_argument("study", help=f"{ALLOWED}; a name under $SLM_RUNS is a run group")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1: this "
                        "machine only; reach it from another through an ssh tunnel)")
    parser.add_argument("--port", type=whole_number(0, 65535), default=8080, help="the port (default 8080; 0: any "
                        "free one, printed)")
    parser.add_argument("--writable", action="store_true", help="let the page change the study (notes, tell a "
                        "trial, delete a study); default read-only")
    args = parser.parse_args(argv)
    found = find_storage(args.study)
    storage, studies = open_found(found)
    try:
        import optuna_dashboard
    except ImportError:
        fail(PROG, "the optuna-dashboard package is not installed: pip install 'optuna-dashboard>=0.21,<0.22'")
    app = optuna_dashboard.wsgi(storage)
    server = listen(args.host, args.port, app if args.writable else read_only(app))
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(summary(f"http://{host}:{server.server_port}", found, studies), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@quiet_on_closed_pipe
def main() -> None:
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
