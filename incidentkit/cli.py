"""The ``incidentkit`` command: inspect evidence, simulate incidents, run flow notebooks.

Exit codes: 0 clean, 1 findings need action, 2 evidence incomplete, 3 usage or manifest
error, 4 a notebook failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from typing import NoReturn

from incidentkit.errors import EXIT_INCOMPLETE, EXIT_USAGE, IncidentkitError
from incidentkit.findings import generator

EXIT_CLEAN = 0


def _inspect(args: argparse.Namespace) -> int:
    from incidentkit.coverage import measure, render_text
    from incidentkit.evidence import open_evidence

    report = measure(open_evidence(args.path))
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_text(report))
    return EXIT_CLEAN if report.complete else EXIT_INCOMPLETE


def _simulate(args: argparse.Namespace) -> int:
    from incidentkit.simulate import run_cli

    code: int = run_cli(args)
    return code


def _pairs(pairs: list[list[str]] | None) -> dict[str, str]:
    return {name: value for name, value in (pairs or [])}


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from incidentkit.runner import coerce_parameters, failed_findings, run_flow

    try:
        params = coerce_parameters(args.flow, _pairs(args.parameter))
        result = run_flow(
            args.flow,
            args.evidence,
            args.out,
            parameters=params,
            timeout=args.timeout,
            show_code=args.show_code,
            progress=not args.quiet,
        )
    except IncidentkitError as err:
        # Refused before the notebook ran: --out still gets a findings.json saying why (a
        # scheduler that parses findings always has one, never an earlier run's).
        out = Path(args.out)
        with contextlib.suppress(OSError):  # a file of that name, or no permission
            out.mkdir(parents=True, exist_ok=True)
        if out.is_dir():
            failed_findings(args.flow, f"{type(err).__name__}: {err}", {}).write(
                out / "findings.json"
            )
        raise
    lines = [f"notebook: {result.notebook}", f"report:   {result.html}"]
    if result.findings:
        lines.append(f"findings: {result.findings} ({result.verdict})")
    if result.error:
        lines.append(f"incidentkit: {result.error}")
    sys.stderr.write("\n".join(lines) + "\n")
    return result.exit_code


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
    return EXIT_CLEAN


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
        return EXIT_INCOMPLETE
    return EXIT_CLEAN


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error; here 2 means incomplete evidence, so use 3."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


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
        help="print the coverage report of an incident's evidence",
        description="Load every source of the manifest and report rows per frame, time span, "
        "rejects by reason with their locations, warnings, and join coverage.",
        epilog="exit codes: 0 every source was read; 2 a source could not be read, is empty, "
        "or had every record rejected; 3 a usage error or a bad manifest",
    )
    inspect.add_argument("path", help="an evidence.toml, or a folder holding one")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.set_defaults(handler=_inspect)

    session = sub.add_parser(
        "session",
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
    session.set_defaults(handler=_session)

    simulate = sub.add_parser(
        "simulate",
        help="write a simulated incident (evidence + truth.json)",
        description="Write one scenario's evidence, consistent across every source, with "
        "the truth a correct investigation must find.",
    )
    if with_simulate:  # the simulator is a third of the package: only its command loads it
        from incidentkit.simulate import add_arguments as add_simulate_arguments

        add_simulate_arguments(simulate)
    simulate.set_defaults(handler=_simulate)

    from incidentkit.flows import FLOWS

    run = sub.add_parser(
        "run",
        help="execute a flow notebook with papermill and write its report",
        description="Execute notebooks/<flow>.ipynb against the evidence; write the executed "
        "notebook, an HTML report and findings.json. Exit 0 clean, 1 findings need action, "
        "2 evidence incomplete, 3 usage or manifest error, 4 notebook failed.",
    )
    run.add_argument("flow", help=f"the triage flow to run: {', '.join(sorted(FLOWS))}")
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
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(handler=_run)

    new = sub.add_parser(
        "new",
        help="write a parameterised flow notebook for one incident",
        description="Copy a flow notebook with its parameters filled in, to open in JupyterLab.",
    )
    new.add_argument("incident", help="incident name, e.g. INC-1234")
    new.add_argument("--flow", required=True, help=f"one of {', '.join(sorted(FLOWS))}")
    new.add_argument("--evidence", required=True, help="evidence.toml or its folder")
    new.add_argument("--out", help="folder to write into (default incidents/INCIDENT)")
    new.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"))
    new.set_defaults(handler=_new)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = next((word for word in words if not word.startswith("-")), None)
    parser = build_parser(with_simulate=command == "simulate")
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help (0) or a usage error (3)
        return done.code if isinstance(done.code, int) else EXIT_USAGE
    try:
        code: int = args.handler(args)
    except IncidentkitError as err:
        sys.stderr.write(f"incidentkit: {err}\n")
        return err.exit_code
    return code


if __name__ == "__main__":
    sys.exit(main())
