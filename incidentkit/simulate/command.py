"""``incidentkit simulate SCENARIO --out DIR [...]``: the command-line face of the simulator."""

from __future__ import annotations

import argparse
import sys
import time

from incidentkit.errors import IncidentkitError
from incidentkit.manifest import resolve_url
from incidentkit.simulate.driver import EVENTS_FORMATS, URL_ENV, simulate
from incidentkit.simulate.scenarios import SCENARIOS
from incidentkit.simulate.truth import read


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``simulate`` sub-command's arguments to ``parser``."""
    parser.add_argument("scenario", choices=sorted(SCENARIOS), help="which incident to simulate")
    parser.add_argument("--out", required=True, help="folder for the pack (new, empty or a pack)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--scale", type=int, default=1, help="multiply the background traffic (default 1)"
    )
    parser.add_argument(
        "--events-format",
        choices=EVENTS_FORMATS,
        default="adk-java",
        help="ADK Java Event JSON lines (default), an ADK Python session database, Vertex AI "
        "Agent Engine API JSON (vertex-ai) or a Firestore export (firestore)",
    )
    parser.add_argument(
        "--into",
        metavar="URL",
        help="load ledger, events and journal into this empty database (a SQLAlchemy URL, or "
        f"env:NAME); the manifest then reads them from env:{URL_ENV}",
    )


def run_cli(args: argparse.Namespace) -> int:
    """Run the command; 0 on success, 3 when the request cannot be done (message on stderr)."""
    began = time.perf_counter()
    try:
        into = None if args.into is None else resolve_url(args.into, section="--into")
        folder = simulate(
            args.scenario,
            args.out,
            seed=args.seed,
            scale=args.scale,
            events_format=args.events_format,
            into=into,
        )
    except IncidentkitError as err:
        print(f"incidentkit simulate: {err}", file=sys.stderr)
        return err.exit_code
    counts = read(folder / "truth.json")["counts"]
    summary = ", ".join(f"{n} {name}" for name, n in counts.items() if n)
    print(f"wrote {args.scenario} to {folder} in {time.perf_counter() - began:.1f} s: {summary}")
    print(f"  truth: {folder / 'truth.json'}")
    if args.into is not None:
        print(f"  ledger, events and journal are in the database; export {URL_ENV} to load them")
    print(f"  inspect it: incidentkit inspect {folder}")
    return 0
