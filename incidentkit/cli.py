"""The ``incidentkit`` command: inspect evidence, simulate incidents, run flow notebooks.

Exit codes: 0 clean, 1 findings need action, 2 evidence incomplete, 3 usage or manifest
error, 4 a notebook failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from incidentkit import cache, outputs, progress, stopping
from incidentkit.errors import Exit, IncidentkitError
from incidentkit.findings import generator
from incidentkit.stopping import Interrupted

if TYPE_CHECKING:  # the command starts without pandas: only a command that needs it loads it
    import pandas as pd

    from incidentkit.manifest import Manifest


def _inspect(args: argparse.Namespace) -> int:
    """Coverage of the evidence; a filter of the manifest that names nothing the evidence
    holds is refused (exit 3) before anything is measured."""
    from incidentkit.coverage import check_filters, measure, render_text
    from incidentkit.evidence import open_evidence

    evidence = open_evidence(args.path)
    check_filters(evidence)
    report = measure(evidence)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_text(report))
    return Exit.CLEAN if report.complete else Exit.INCOMPLETE_EVIDENCE


def _snapshot(args: argparse.Namespace) -> int:
    from incidentkit import schedule
    from incidentkit.coverage import render_text
    from incidentkit.snapshot import take

    taken = take(args.evidence, args.out, as_of=schedule.parse_as_of(args.as_of))
    rows = sum(taken.rows.values())
    sys.stderr.write(
        f"snapshot: {taken.folder} ({len(taken.rows)} frames, {rows:,} rows, "
        f"{taken.bytes / 1e6:,.1f} MB)\n"
        f"          open it as the evidence: incidentkit run all --evidence {taken.folder} "
        "--out OUT\n"
    )
    if not args.quiet:
        sys.stdout.write(render_text(taken.coverage))
    return Exit.CLEAN if taken.coverage.complete else Exit.INCOMPLETE_EVIDENCE


def _simulate(args: argparse.Namespace) -> int:
    from incidentkit.simulate import run_cli

    code: int = run_cli(args)
    return code


def _pairs(pairs: list[list[str]] | None) -> dict[str, str]:
    return {name: value for name, value in (pairs or [])}


def _run(args: argparse.Namespace) -> int:
    """``run FLOW`` and ``run all``, holding their output folder; with ``--timestamped`` into a
    new folder under ``--out``, with ``latest`` pointed at it once the run has its result
    document (a refused or failed run's says why; an interrupted run never moves it)."""
    from incidentkit import schedule

    raw = _pairs(args.parameter)
    folder = Path(args.out)
    refusal: IncidentkitError | None = None
    given = None
    try:
        given = schedule.parse_as_of(args.as_of)
    except IncidentkitError as err:  # reported in the run's folder, once it is held
        refusal = err
    if args.timestamped:  # named by the moment judged, else the start
        folder = schedule.stamped_folder(args.out, given or schedule.now())
    with outputs.holding(folder) as gone:
        if gone is not None:
            sys.stderr.write(
                f"warning: took over {folder} from run pid {gone}, which ended without "
                "finishing; its files there may be partial\n"
            )
        try:
            if refusal is not None:
                raise refusal
            if given is not None and str(raw.get("as_of") or "").strip():
                from incidentkit.errors import ParameterError

                raise ParameterError(
                    "the run's time is given twice",
                    value=[args.as_of, raw["as_of"]],
                    fix="give either --as-of (now or a UTC time) or -p as_of, not both",
                )
            code = (
                _run_all(args, folder, raw, given)
                if args.flow == "all"
                else _run_one(args, folder, raw, given)
            )
        except Interrupted as stop:
            if args.flow != "all":
                stop.note = f"{folder / 'findings.json'} says so"
            raise
        except Exception as err:  # refused, or failed: the folder says why, then main does
            if isinstance(err, OSError) and not err.filename:  # a write() that found no room
                err.filename = str(folder)
            _record_failure(args.flow, folder, err, raw)
            _point_latest(args, folder)
            raise
    _point_latest(args, folder)
    return code


def _point_latest(args: argparse.Namespace, folder: Path) -> None:
    from incidentkit import schedule

    done = (folder / ("summary.json" if args.flow == "all" else "findings.json")).is_file()
    if args.timestamped and done and folder != Path(args.out):
        link = schedule.point_latest(folder)
        sys.stderr.write(f"latest:   {link} -> {os.readlink(link)}\n")


def _scheduled_as_of(
    given: pd.Timestamp | None, raw: dict[str, str], evidence: str
) -> tuple[Manifest, pd.Timestamp | None]:
    """The run's as_of for scheduling (stale check, relative window): ``--as-of``; with a
    relative manifest window also ``-p as_of``, else now. None: no scheduling checks."""
    from incidentkit import schedule
    from incidentkit.manifest import load_manifest
    from incidentkit.times import utc_timestamp

    manifest = load_manifest(evidence)
    window = manifest.filters.window
    if given is None and window is not None and window.last is not None:
        text = str(raw.get("as_of") or "").strip()
        given = utc_timestamp(text, what="as_of") if text else schedule.now()
    return manifest, given


def _as_of_from(given: pd.Timestamp | None, raw: dict[str, str], as_of: pd.Timestamp | None) -> str:
    """Where the run's as_of comes from, as its report says: ``--as-of``, ``-p as_of``, or the
    run's start (a relative window without either); "" when no as_of is given (each flow
    then takes its window's end, else its evidence's last record)."""
    if given is not None:
        return "--as-of"
    if str(raw.get("as_of") or "").strip():
        return "-p as_of"
    return "the run's start (relative window)" if as_of is not None else ""


def _run_one(
    args: argparse.Namespace, folder: Path, raw: dict[str, str], given: pd.Timestamp | None
) -> int:
    from incidentkit import schedule
    from incidentkit.findings import iso_text
    from incidentkit.runner import coerce_parameters, declared_parameters, run_flow

    params = coerce_parameters(args.flow, raw)
    stale_after = schedule.parse_stale_after(args.stale_after)
    manifest, as_of = _scheduled_as_of(given, raw, args.evidence)
    as_of_from = _as_of_from(given, raw, as_of)
    extra = []
    if as_of is not None:
        if "as_of" in declared_parameters(args.flow):
            params["as_of"] = iso_text(as_of)
        end, frame = schedule.evidence_end(manifest, as_of)
        window = schedule.run_window(manifest, as_of)
        stale = schedule.stale_finding(as_of, end, frame, window=window, stale_after=stale_after)
        extra += [stale] if stale is not None else []
    result = run_flow(
        args.flow,
        args.evidence,
        folder,
        parameters=params,
        timeout=args.timeout,
        show_code=args.show_code,
        progress=not args.quiet,
        extra_items=extra,
        as_of_from=as_of_from,
        stale_after=stale_after,
    )
    lines = [f"notebook: {result.notebook}", f"report:   {result.html}"]
    if result.findings:
        lines.append(f"findings: {result.findings} ({result.verdict})")
    lines += [f"warning:  {item.id}: {item.title}" for item in extra]
    if result.error:
        lines.append(f"incidentkit: {result.error}")
    sys.stderr.write("\n".join(lines) + "\n")
    return result.exit_code


def _run_all(
    args: argparse.Namespace, folder: Path, raw: dict[str, str], given: pd.Timestamp | None
) -> int:
    from incidentkit import schedule
    from incidentkit.batch import run_all

    if args.jobs is not None and args.jobs < 1:
        from incidentkit.errors import ParameterError

        raise ParameterError(
            "--jobs must be a positive number", value=args.jobs, fix="give e.g. --jobs 2"
        )
    _, as_of = _scheduled_as_of(given, raw, args.evidence)
    result = run_all(
        args.evidence,
        folder,
        parameters=raw,
        as_of=as_of,
        as_of_from=_as_of_from(given, raw, as_of),
        stale_after=schedule.parse_stale_after(args.stale_after),
        timeout=args.timeout,
        show_code=args.show_code,
        jobs=args.jobs,
    )
    lines = [
        f"{o.flow:<15} {o.verdict or '-':<20} exit {o.exit_code}"
        + (f"  {o.error}" if o.error else "")
        for o in result.outcomes
    ]
    lines += [f"{name:<15} skipped: {reason}" for name, reason in result.skipped.items()]
    if result.stale is not None:
        lines.append(f"warning: {result.stale.id}: {result.stale.title}")
    lines.append(f"index:   {result.out / 'index.html'}")
    lines.append(f"summary: {result.out / 'summary.json'} (exit {result.exit_code})")
    sys.stderr.write("\n".join(lines) + "\n")
    return result.exit_code


def _record_failure(flow: str, folder: Path, err: Exception, raw: dict[str, str]) -> None:
    """Refused or failed before the verdict: the run's folder still gets a findings.json
    (``run all``: a summary.json) saying why, when it can be written. A scheduler that parses
    it always has one, never an earlier run's."""
    from incidentkit.batch import internal_error_text, refused_summary
    from incidentkit.runner import failed_findings

    if not folder.is_dir():
        return
    with contextlib.suppress(OSError):  # the disk that refused the run refuses this too
        if flow == "all":
            refused_summary(folder, err, raw)
        else:
            text = (
                f"{type(err).__name__}: {err}"
                if isinstance(err, IncidentkitError)
                else internal_error_text(err)
            )
            failed_findings(flow, text, {}).write(folder / "findings.json")


def _new(args: argparse.Namespace) -> int:
    from incidentkit.flows import FLOWS
    from incidentkit.runner import coerce_parameters, new_notebook

    params = coerce_parameters(args.flow, _pairs(args.parameter))
    path = new_notebook(args.incident, args.flow, args.evidence, out=args.out, parameters=params)
    sys.stderr.write(f"wrote {path}; open it with: jupyter lab {path}\n")
    missing = [name for name in FLOWS[args.flow].required if not params.get(name)]
    if missing:
        sys.stderr.write(
            f"note: the {args.flow} flow needs {', '.join(missing)}: set it in the notebook's "
            f"first cell, or give -p {missing[0]} VALUE to incidentkit new\n"
        )
    elif not params.get("app_name"):
        apps = _apps_to_choose(args.flow, args.evidence)
        if len(apps) > 1:
            sys.stderr.write(
                f"note: the evidence holds the apps {', '.join(apps)} and the manifest names "
                "none: set app_name in the notebook's first cell, or give -p app_name "
                f"{apps[0]} to incidentkit new\n"
            )
    return Exit.CLEAN


def _apps_to_choose(flow: str, evidence: str) -> list[str]:
    """The apps a flow that sweeps one app would have to choose from (none when the manifest
    names its app, or the flow takes none)."""
    from incidentkit.evidence import open_evidence
    from incidentkit.flows.common import ledger_apps, logged_apps
    from incidentkit.runner import declared_parameters

    if "app_name" not in declared_parameters(flow):
        return []
    incident = open_evidence(evidence)
    if incident.filters.app_name:
        return []
    return ledger_apps(incident) if incident.has("ledger") else logged_apps(incident)[0]


def _session(args: argparse.Namespace) -> int:
    from incidentkit.evidence import open_evidence
    from incidentkit.flows.session import dump_text, session_dump

    incident = open_evidence(args.evidence)
    if not incident.has("events"):
        from incidentkit.errors import ParameterError

        raise ParameterError(
            "the manifest names no event log to dump a session from",
            value=str(args.evidence),
            fix="add an [events] section to the manifest (docs/manifest.md)",
        )
    from incidentkit.manifest import Filters

    # The session's whole history, whatever the manifest's window (a database reads it alone);
    # an unknown session is read against everything, so the error can name the sessions held.
    mine = incident.narrowed(Filters(session_ids=(args.session_id,)))
    source = mine if len(mine.events) else incident
    dump = session_dump(
        source.events,
        source.calls,
        source.responses,
        source.frame("state_writes"),
        args.session_id,
    )
    sys.stdout.write(dump_text(dump))
    rejects = source.rejects_of(["events"])
    if len(rejects):
        sys.stderr.write(
            f"incidentkit: {len(rejects)} event row(s) could not be read and are not in the "
            "dump; run incidentkit inspect for their locations\n"
        )
        return Exit.INCOMPLETE_EVIDENCE
    return Exit.CLEAN


def _postmortem(args: argparse.Namespace) -> int:
    from incidentkit.postmortem import postmortem_command

    sys.stdout.write(postmortem_command(Path(args.out), fmt=args.format))
    return Exit.CLEAN


def _actions(args: argparse.Namespace) -> int:
    from incidentkit.flows.orphans.export import actions_command

    sys.stdout.write(actions_command(Path(args.out), kind=args.kind, fmt=args.format))
    return Exit.CLEAN


def _demo(args: argparse.Namespace) -> int:
    from incidentkit.demo import run_demo

    page, runs = run_demo(args.fixtures, args.out, jobs=args.jobs)
    for run in runs:
        sys.stdout.write(f"{run.pack:16} exit {run.exit_code}  {run.folder / 'index.html'}\n")
    sys.stdout.write(f"open {page}\n")
    worst = max((run.exit_code for run in runs), default=Exit.CLEAN)
    return Exit.CLEAN if worst <= Exit.INCOMPLETE_EVIDENCE else worst  # reports are fine


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error; here 2 means incomplete evidence, so use 3. A
    command's parser is given the ``handler`` that runs it."""

    def __init__(
        self, *args: Any, handler: Callable[[argparse.Namespace], int] | None = None, **kw: Any
    ) -> None:
        super().__init__(*args, **kw)
        if handler is not None:
            self.set_defaults(handler=handler)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(Exit.USAGE, f"{self.prog}: error: {message}\n")


NO_CACHE_HELP = "read every source afresh: neither read nor write the cache of loaded sources"


def _cache(args: argparse.Namespace) -> int:
    if args.action == "clear":
        entries, size = cache.clear()
        print(
            f"cleared {cache.root()}: {entries} entr{'y' if entries == 1 else 'ies'}, "
            f"{size / 2**20:,.1f} MiB"
        )
        return Exit.CLEAN
    entries, size = cache.usage()
    logged = [how for how, _, _ in cache.loads()]
    print(
        f"{cache.root()}: {entries} entr{'y' if entries == 1 else 'ies'}, "
        f"{size / 2**20:,.1f} MiB of {cache.CAP_BYTES / 2**30:,.0f} GiB; since it was "
        f"cleared, {logged.count('parse')} source(s) parsed, {logged.count('read')} read "
        "from it"
    )
    return Exit.CLEAN


def _loading_options(parser: _Parser, *, quiet: str = "no progress of long loads") -> None:
    """``--quiet`` and ``--no-cache``, last among the options of a command that loads evidence
    (``run`` has its own order)."""
    parser.add_argument("--quiet", action="store_true", help=quiet)
    parser.add_argument("--no-cache", action="store_true", help=NO_CACHE_HELP)


class _WithFlowList(argparse.HelpFormatter):
    """Help that wraps the description as usual and keeps the epilog's lines (the flows)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("flows:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _flows_list() -> str:
    """Each registered flow with its one-line summary, for ``run --help``."""
    import textwrap

    from incidentkit.flows import FLOWS

    width = max(map(len, FLOWS)) + 2
    lines = ["flows:"]
    for name, flow in FLOWS.items():
        wrapped = textwrap.wrap(flow.summary, width=78 - width - 2) or [""]
        lines.append(f"  {name.ljust(width)}{wrapped[0]}")
        lines += [" " * (width + 2) + rest for rest in wrapped[1:]]
    return "\n".join(lines)


def build_parser(*, with_simulate: bool = True) -> argparse.ArgumentParser:
    """The command's parser; without ``with_simulate`` the simulate command takes no options
    (so ``inspect``, ``run`` and ``new`` never import the simulator)."""
    parser = _Parser(
        prog="incidentkit",
        description="Investigate ADK agent incidents: load evidence, run triage notebooks.",
    )
    parser.add_argument("--version", action="version", version=generator())
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

    inspect = sub.add_parser(
        "inspect",
        handler=_inspect,
        help="print the coverage report of an incident's evidence",
        description="Load every source of the manifest and report rows per frame, time span, "
        "rejects by reason with their locations, warnings, and join coverage.",
        epilog="exit codes: 0 every source was read; 2 a source could not be read, is empty, "
        "or had every record rejected; 3 a usage error or a bad manifest",
    )
    inspect.add_argument("path", help="an evidence.toml, or a folder holding one")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    _loading_options(inspect)

    session = sub.add_parser(
        "session",
        handler=_session,
        help="print one session's events, one line per event",
        description="The session dump: per stored event its time (UTC), invocation, author, "
        "function calls and responses, state delta keys, transfer, error code and whether it "
        "is a final response. Read it before forming a theory.",
        epilog="exit codes: 0 printed; 2 some event rows could not be read (the dump lacks "
        "them); 3 no such session, or a usage or manifest error",
    )
    session.add_argument("session_id", help="the session id, as the event log stores it")
    session.add_argument(
        "--evidence", required=True, help="an evidence.toml, or a folder holding one"
    )
    _loading_options(session)

    snapshot = sub.add_parser(
        "snapshot",
        handler=_snapshot,
        help="freeze an incident's evidence into Parquet, to re-run its flows later",
        description="Read every source of the manifest whole and write its frames, rejects "
        "and warnings as Parquet into OUT, with OUT/evidence.toml (open OUT as the evidence), "
        "OUT/coverage.json and OUT/source-evidence.toml. The same evidence gives the same "
        "bytes; a snapshot reloads far faster than its sources.",
        epilog="exit codes: 0 written, every source read; 2 written, but a source had every "
        "record rejected; 3 a usage error, a bad manifest or OUT not empty",
    )
    snapshot.add_argument("evidence", help="an evidence.toml, or a folder holding one")
    snapshot.add_argument("--out", required=True, help="a new (or empty) folder to write")
    snapshot.add_argument(
        "--as-of",
        help="where a relative manifest window (last = ...) ends: now or a UTC time "
        "(default now); the same --as-of takes the same snapshot twice",
    )
    _loading_options(snapshot, quiet="no coverage report, no progress")

    simulate = sub.add_parser(
        "simulate",
        handler=_simulate,
        help="write a simulated incident (evidence + truth.json)",
        description="Write one scenario's evidence, consistent across every source, with "
        "the truth a correct investigation must find.",
    )
    if with_simulate:  # the simulator is a third of the package: only its command loads it
        from incidentkit.simulate import add_arguments as add_simulate_arguments

        add_simulate_arguments(simulate)

    from incidentkit.flows import FLOWS

    run = sub.add_parser(
        "run",
        handler=_run,
        help="execute a flow notebook (or every flow: all) with papermill and write its report",
        description="Execute notebooks/<flow>.ipynb against the evidence; write the executed "
        "notebook, an HTML report and findings.json. 'all' runs every flow the evidence "
        "supports into OUT/<flow>/, with OUT/index.html and OUT/summary.json. Exit 0 clean, "
        "1 findings need action, 2 evidence incomplete, 3 usage or manifest error, 4 notebook "
        "failed (run all: the worst of its flows).",
        epilog=_flows_list(),
        formatter_class=_WithFlowList,
    )
    run.add_argument(
        "flow", help=f"the triage flow to run: {', '.join(sorted(FLOWS))}, or all of them: all"
    )
    run.add_argument("--evidence", required=True, help="evidence.toml or its folder")
    run.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        help="a notebook parameter (repeatable); dicts and lists as JSON",
    )
    run.add_argument("--out", required=True, help="folder for notebook, HTML and findings")
    run.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell")
    run.add_argument("--show-code", action="store_true", help="keep code in the HTML report")
    run.add_argument(
        "--quiet", action="store_true", help="no progress bars (cells run, evidence loaded)"
    )
    run.add_argument(
        "--as-of",
        metavar="TIME",
        help="the moment judged: now, or a UTC time such as 2026-12-02T06:15:00Z; sets the "
        'flows\' as_of and the end of a relative window (window = { last = "2h" })',
    )
    run.add_argument(
        "--timestamped",
        action="store_true",
        help="write into a new folder OUT/<UTC time, e.g. 2026-12-02T061500Z>/ and point "
        "OUT/latest at it; never overwrites an earlier run",
    )
    run.add_argument(
        "--stale-after",
        metavar="DURATION",
        help="with --as-of or a relative window: warn (run/stale-evidence) when as_of is past "
        "the evidence's last row by more than this (default: the window's length, else 1h)",
    )
    run.add_argument(
        "--jobs",
        type=int,
        help="run all: flows run at once (default: the CPUs, at most one per flow)",
    )
    run.add_argument("--no-cache", action="store_true", help=NO_CACHE_HELP)

    kept = sub.add_parser(
        "cache",
        handler=_cache,
        help="show or clear the cache of loaded sources",
        description="Every load of a file source is kept in the user's cache folder, so the "
        "next flow, notebook re-run or inspect of the same files reads it instead of parsing "
        "again (a changed file is read afresh; databases are never kept). 'info' says where "
        "it is and what it holds; 'clear' deletes it.",
        epilog="exit codes: 0 done; 3 a usage error",
    )
    kept.add_argument("action", choices=("info", "clear"), help="info or clear")

    new = sub.add_parser(
        "new",
        handler=_new,
        help="write a parameterised flow notebook for one incident",
        description="Copy a flow notebook with its parameters filled in, to open in JupyterLab.",
    )
    new.add_argument("incident", help="incident name, e.g. INC-1234")
    new.add_argument("--flow", required=True, help=f"one of {', '.join(sorted(FLOWS))}")
    new.add_argument("--evidence", required=True, help="evidence.toml or its folder")
    new.add_argument("--out", help="folder to write into (default incidents/INCIDENT)")
    new.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"))

    postmortem = sub.add_parser(
        "postmortem",
        handler=_postmortem,
        help="draft a postmortem from one incident's findings",
        description="Turn the findings of one flow's --out folder (or of run all's) into a "
        "postmortem draft on standard output; save it in that folder (its links are relative).",
    )
    postmortem.add_argument("out", help="the --out folder of incidentkit run (a flow or all)")
    postmortem.add_argument("--format", default="md", choices=("md", "html"))

    actions = sub.add_parser(
        "actions",
        handler=_actions,
        help="list the runs to act on after a crash (from the orphans flow's findings)",
        description="The run ids and sessions the orphans flow says to re-drive, park, mark "
        "done or ask downstream about, for whoever runs the recovery.",
    )
    actions.add_argument("out", help="the --out folder of incidentkit run orphans (or all)")
    actions.add_argument("--kind", required=True, help="REDRIVE, PARK, MARK_DONE, ASK_DOWNSTREAM")
    actions.add_argument("--format", default="csv", choices=("csv", "json"))

    demo = sub.add_parser(
        "demo",
        handler=_demo,
        help="run every flow on every bundled incident and link the reports",
        description="One run all per bundled incident (fixtures/ of a checkout) into OUT, and "
        "OUT/index.html linking them.",
    )
    demo.add_argument("--out", default="out/demo", help="folder to write into (out/demo)")
    demo.add_argument("--fixtures", default="fixtures", help="the bundled incidents (fixtures)")
    demo.add_argument("--jobs", type=int, help="flows run at once (default: the CPUs)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit code (:class:`~incidentkit.errors.Exit`). Whatever
    happens ends in one line on standard error, never a traceback."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = next((word for word in words if not word.startswith("-")), None)
    parser = build_parser(with_simulate=command == "simulate")
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help (0) or a usage error (3)
        return done.code if isinstance(done.code, int) else Exit.USAGE
    try:
        if getattr(args, "no_cache", False):  # the kernels this run starts inherit it
            os.environ[cache.DISABLE_ENV] = "1"
        with (
            stopping.handling(),
            progress.quiet() if getattr(args, "quiet", False) else contextlib.nullcontext(),
        ):
            code: int = _stoppable(args)
    except IncidentkitError as err:
        sys.stderr.write(f"incidentkit: {err}\n")
        return err.exit_code
    except Interrupted as stop:
        note = f"; {stop.note}" if stop.note else ""
        sys.stderr.write(f"incidentkit: interrupted by {stop.signal_name}{note}\n")
        return stop.exit_code
    except KeyboardInterrupt:  # a SIGINT before the handler was installed
        sys.stderr.write("incidentkit: interrupted by SIGINT\n")
        return Exit.INTERRUPTED
    except Exception as err:  # noqa: BLE001 - outside the kit's family: one line, exit 4
        from incidentkit.batch import internal_error_text

        sys.stderr.write(f"incidentkit: {internal_error_text(err)}\n")
        return Exit.FAILURE
    return code


def _stoppable(args: argparse.Namespace) -> int:
    """Run the command; a failure that follows a stop signal is the stop. A library that
    checks for signals in its own loop (DuckDB, Arrow) may turn the kit's stop into an error
    of its own: the command still says it was interrupted, with the signal's exit code."""
    try:
        code: int = args.handler(args)
    except Exception as err:
        signum = stopping.requested()
        if signum is None:
            raise
        raise Interrupted(signum) from err
    return code


if __name__ == "__main__":
    sys.exit(main())
