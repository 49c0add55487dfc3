"""The ``incidentkit`` command: inspect evidence, simulate incidents, run flow notebooks.

Exit codes: 0 clean, 1 findings need action, 2 evidence incomplete, 3 usage or manifest
error, 4 a notebook failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from incidentkit.errors import (
    IncidentkitError,
    ManifestError,
    NotebookError,
    ParameterError,
    SimulationError,
    SourceError,
)

EXIT_CLEAN, EXIT_FINDINGS, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_NOTEBOOK = 0, 1, 2, 3, 4


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


def _run(args: argparse.Namespace) -> int:
    from incidentkit.runner import run_cli

    return run_cli(args)


def _new(args: argparse.Namespace) -> int:
    from incidentkit.runner import new_cli

    return new_cli(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="incidentkit",
        description="Investigate ADK agent incidents: load evidence, run triage notebooks.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    inspect = sub.add_parser(
        "inspect",
        help="print the coverage report of an incident's evidence",
        description="Load every source of the manifest and report rows per frame, time span, "
        "rejects by reason with their locations, and join coverage.",
    )
    inspect.add_argument("path", help="an evidence.toml, or a folder holding one")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.set_defaults(handler=_inspect)

    simulate = sub.add_parser(
        "simulate",
        help="write a simulated incident (evidence + truth.json)",
        description="Write one scenario's evidence, consistent across every source, with "
        "the truth a correct investigation must find.",
    )
    from incidentkit.simulate import add_arguments as add_simulate_arguments

    add_simulate_arguments(simulate)
    simulate.set_defaults(handler=_simulate)

    from incidentkit.runner import add_new_arguments, add_run_arguments

    run = sub.add_parser(
        "run",
        help="execute a flow notebook with papermill and write its report",
        description="Execute notebooks/<flow>.ipynb against the evidence; write the executed "
        "notebook, an HTML report and findings.json. Exit 0 clean, 1 findings need action, "
        "2 evidence incomplete, 3 usage or manifest error, 4 notebook failed.",
    )
    add_run_arguments(run)
    run.set_defaults(handler=_run)

    new = sub.add_parser(
        "new",
        help="write a parameterised flow notebook for one incident",
        description="Copy a flow notebook with its parameters filled in, to open in JupyterLab.",
    )
    add_new_arguments(new)
    new.set_defaults(handler=_new)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except (ManifestError, ParameterError, SimulationError) as err:
        sys.stderr.write(f"incidentkit: {err}\n")
        return EXIT_USAGE
    except SourceError as err:
        sys.stderr.write(f"incidentkit: {err}\n")
        return EXIT_INCOMPLETE
    except NotebookError as err:
        sys.stderr.write(f"incidentkit: {err}\n")
        return EXIT_NOTEBOOK
    except IncidentkitError as err:
        sys.stderr.write(f"incidentkit: {err}\n")
        return EXIT_USAGE
    return code


if __name__ == "__main__":
    sys.exit(main())
