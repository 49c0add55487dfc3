"""``incidentkit run all``: every flow the evidence supports, in parallel, with an index.

Each flow runs as ``incidentkit run <flow>`` would, into ``OUT/<flow>/``. ``OUT/summary.json``
(:data:`SUMMARY_SCHEMA`) and ``OUT/index.html`` say what each found and which flows were skipped
and why. A flow whose notebook declares ``summary_path`` runs after the others and is given
``OUT/summary.json`` with their results. ``docs/scheduling.md`` describes the files.
"""

from __future__ import annotations

import asyncio
import errno
import html
import json
import os
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from incidentkit import cache, stopping
from incidentkit.errors import Exit, IncidentkitError, NotebookError, ParameterError
from incidentkit.findings import Finding, Findings, generator, iso_text
from incidentkit.flows import FLOWS, Flow
from incidentkit.manifest import Manifest, Window, did_you_mean, find_manifest, load_manifest
from incidentkit.outputs import final_name, write_atomic
from incidentkit.redact import scrub_text
from incidentkit.runner import (
    RUNNER_PARAMETERS,
    check_sources,
    coerce_parameters,
    declared_parameters,
    failed_findings,
    run_flow,
    scan_for_secrets,
)
from incidentkit.schedule import evidence_end, run_window, stale_finding
from incidentkit.stopping import Interrupted

SUMMARY_SCHEMA = "incidentkit.run-all/v1"
SUMMARY_PARAMETER = "summary_path"
"""A notebook parameter naming ``OUT/summary.json``: its flow runs after every other flow."""


@dataclass(frozen=True)
class FlowOutcome:
    """One flow's run: its exit code, verdict, files (relative to OUT) and top finding."""

    flow: str
    exit_code: int
    verdict: str | None
    files: Mapping[str, str | None]
    parameters: Mapping[str, Any]
    seconds: float
    error: str | None = None
    top_finding: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": status_of(self.exit_code),
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "error": self.error,
            "top_finding": None if self.top_finding is None else dict(self.top_finding),
            **dict(self.files),
            "parameters": dict(self.parameters),
            "seconds": round(self.seconds, 2),
        }


@dataclass(frozen=True)
class BatchResult:
    """What ``run all`` did: the worst exit code, each flow's outcome, the skipped flows."""

    exit_code: int
    out: Path
    outcomes: tuple[FlowOutcome, ...]
    skipped: Mapping[str, str]
    stale: Finding | None = None
    summary: Mapping[str, Any] = field(default_factory=dict)


def skip_reason(flow: Flow, sections: Collection[str], given: Mapping[str, Any]) -> str | None:
    """Why ``flow`` cannot run on evidence with these manifest ``sections`` and ``-p`` values
    (None when it can): a section it needs, else a required parameter not given."""
    if flow.needs:
        missing = [section for section in flow.needs if section not in sections]
        if missing:
            return f"needs [{missing[0]}] in the manifest"
    elif flow.sections and not any(section in sections for section in flow.sections):
        return f"needs one of [{'], ['.join(flow.sections)}] in the manifest"
    absent = [name for name in flow.required if not str(given.get(name) or "").strip()]
    if absent:
        return f"needs -p {absent[0]}"
    return None


def run_all(
    evidence: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    parameters: Mapping[str, str] | None = None,
    as_of: pd.Timestamp | None = None,
    stale_after: pd.Timedelta | None = None,
    timeout: int = 600,
    show_code: bool = False,
    jobs: int | None = None,
    environ: Mapping[str, str] | None = None,
    as_of_from: str | None = None,
) -> BatchResult:
    """Run every flow of :data:`FLOWS` the evidence supports into ``out/<flow>/``; write
    ``out/summary.json`` and ``out/index.html``. ``parameters`` (``-p`` text) go to the flows
    whose notebooks declare them; ``as_of`` (already resolved) to every flow declaring it, with
    where it came from (``as_of_from``, default ``--as-of``; ``-p as_of`` for a parameter) and
    ``stale_after``. A ``session_id`` without an ``app_name`` gives every flow the session's
    app (found in the evidence; an unknown session refuses the run)."""
    started = pd.Timestamp.now(tz="UTC")
    root = Path(out)
    if root.exists() and not root.is_dir():
        raise ParameterError(
            "--out names a file, not a folder",
            value=str(root),
            fix="give a folder for the flows' reports, summary.json and index.html",
        )
    raw = dict(parameters or {})
    manifest_path = find_manifest(evidence).resolve()
    manifest = load_manifest(manifest_path)
    secrets = check_sources(manifest_path, os.environ if environ is None else environ)
    declared = {name: declared_parameters(name) for name in FLOWS}
    _check_names(raw, declared)
    if as_of_from is None:
        given_as_of = as_of is not None or str(raw.get("as_of") or "").strip()
        as_of_from = ("--as-of" if as_of is not None else "-p as_of") if given_as_of else ""
    if as_of is not None:
        raw["as_of"] = iso_text(as_of)
    if str(raw.get("session_id") or "").strip() and not str(raw.get("app_name") or "").strip():
        raw["app_name"] = session_app(manifest_path, raw["session_id"], environ)
    root.mkdir(parents=True, exist_ok=True)
    skipped: dict[str, str] = {}
    runnable: list[str] = []
    for name, flow in FLOWS.items():
        reason = skip_reason(flow, manifest.sources, raw)
        if reason is None:
            runnable.append(name)
        else:
            skipped[name] = reason
    stale = None
    if as_of is not None:
        end, frame = evidence_end(manifest, as_of, environ=environ)
        window = run_window(manifest, as_of)
        stale = stale_finding(as_of, end, frame, window=window, stale_after=stale_after)
    extra = () if stale is None else (stale,)

    def one(name: str) -> FlowOutcome:
        given = {k: v for k, v in raw.items() if k in declared[name]}
        if SUMMARY_PARAMETER in declared[name]:
            given[SUMMARY_PARAMETER] = str((root / "summary.json").resolve())
        signum = stopping.requested()
        if signum is not None:  # stopped before this flow's turn came
            return _interrupted(root, name, Interrupted(signum))
        try:
            return _run_one(
                name,
                manifest_path,
                root,
                given,
                timeout,
                show_code,
                environ,
                extra,
                {"as_of_from": as_of_from, "stale_after": stale_after, "cache_run": run},
            )
        finally:
            if threading.current_thread() is not threading.main_thread():
                _close_thread_loop()

    first = [name for name in runnable if SUMMARY_PARAMETER not in declared[name]]
    last = [name for name in runnable if SUMMARY_PARAMETER in declared[name]]
    workers = max(1, min(jobs or os.cpu_count() or 1, len(first) or 1))
    context = {
        "evidence": str(manifest_path),
        "title": manifest.title,
        "as_of": None if as_of is None else iso_text(as_of),
        "window": _window_text(run_window(manifest, as_of), as_of),
        "parameters": dict(parameters or {}),
        "started_at": iso_text(started),
        "stale": None if stale is None else _finding_dict(stale),
    }
    run = cache.new_run()  # the database sources are read once for all the flows
    _load_once(manifest, environ, run_window(manifest, as_of), run)
    outcomes: list[FlowOutcome] = []
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="incidentkit-flow")
    futures = [pool.submit(one, name) for name in first]
    try:
        outcomes += [future.result() for future in futures]
        if last:  # they read the others' results
            write_summary(root, _summary(context, outcomes, skipped, pending=last))
            for name in last:
                outcomes.append(one(name))
    except Interrupted as stop:  # the kernels are dead: the flows that ran end at once
        pool.shutdown(wait=True, cancel_futures=True)
        done = {o.flow for o in outcomes}
        outcomes += [
            future.result()
            for future in futures
            if future.done() and not future.cancelled() and future.result().flow not in done
        ]
        ended = {o.flow for o in outcomes}
        outcomes += [_interrupted(root, name, stop) for name in runnable if name not in ended]
        summary = _summary(context, outcomes, skipped, pending=[], stopped=stop)
        write_summary(root, summary)
        write_index(root, summary)
        stop.note = f"{root / 'summary.json'} says which flows finished"
        raise
    finally:
        pool.shutdown(wait=True)
        cache.end_run(run)
    summary = _summary(context, outcomes, skipped, pending=[])
    write_summary(root, summary)
    write_index(root, summary)
    _refuse_leaks([root / "summary.json", root / "index.html"], secrets)
    return BatchResult(summary["exit_code"], root, tuple(outcomes), skipped, stale, summary)


def _load_once(
    manifest: Manifest, environ: Mapping[str, str] | None, window: Window | None, run: str
) -> None:
    """Read every source here, once, before the flows' kernels start: each is parsed by this
    process into the cache (:mod:`incidentkit.cache`; a database source for this ``run``
    only), and every kernel reads it from there instead of parsing it again at the same
    time."""
    if not cache.enabled():
        return
    from incidentkit.evidence import Evidence

    filters = replace(manifest.filters, window=window)  # as the kernels anchor it
    evidence = Evidence(manifest, filters=filters, environ=environ, keep=True, run=run)
    for section in manifest.sources:
        try:
            evidence.source(section)
        except Exception:  # noqa: BLE001 - each flow meets the same failure and reports it
            continue


def _refuse_leaks(paths: list[Path], secrets: list[str]) -> None:
    """Delete the pages among ``paths`` that hold a secret from the environment, and fail."""
    leaked = scan_for_secrets(paths, secrets)
    for path in leaked:
        path.unlink()
    if leaked:
        raise NotebookError(
            "a credential from the environment appeared in the run's pages; they were deleted",
            value=[str(p) for p in leaked],
            fix="report this as a bug",
        )


def _interrupted(root: Path, name: str, stop: Interrupted) -> FlowOutcome:
    """The outcome of a flow the signal stopped before its verdict."""
    error = f"interrupted by {stop.signal_name}"
    return FlowOutcome(name, stop.exit_code, None, _files(root, name), {}, 0.0, error)


def _close_thread_loop() -> None:
    """Close the event loop jupyter_client's synchronous calls left in this worker thread (it
    would otherwise be collected unclosed, with its sockets, after the thread ends)."""
    policy = asyncio.get_event_loop_policy()
    try:
        loop = policy.get_event_loop()
    except RuntimeError:  # none was set in this thread
        return
    if not loop.is_running():
        loop.close()
    policy.set_event_loop(None)


def _check_names(raw: Mapping[str, str], declared: Mapping[str, Mapping[str, Any]]) -> None:
    """A ``-p`` no flow declares, or one the runner sets, is a usage error before any run."""
    known = {name for params in declared.values() for name in params}
    for name, text in raw.items():
        if name in RUNNER_PARAMETERS or name == SUMMARY_PARAMETER:
            raise ParameterError(
                f"-p {name} is set by the runner",
                value=text,
                fix=RUNNER_PARAMETERS.get(name, "run all gives it OUT/summary.json"),
            )
        if name not in known:
            raise ParameterError(
                "no flow has the parameter",
                value=name,
                fix=f"{did_you_mean([name], known)}the flows' parameters are "
                f"{', '.join(sorted(known - set(RUNNER_PARAMETERS)))}",
            )


def session_app(manifest: Path, session_id: str, environ: Mapping[str, str] | None) -> str:
    """The app of the session ``-p session_id`` names, read off the evidence (as the
    one-session flows find it); an unknown session is a ParameterError naming the closest."""
    from incidentkit.evidence import open_evidence
    from incidentkit.flows._session import find_session

    return find_session(open_evidence(manifest, environ=environ), session_id.strip()).app_name


def _run_one(
    name: str,
    manifest: Path,
    root: Path,
    given: Mapping[str, str],
    timeout: int,
    show_code: bool,
    environ: Mapping[str, str] | None,
    extra: Sequence[Finding],
    judging: Mapping[str, Any],
) -> FlowOutcome:
    """One flow into ``root/<name>/``; a refusal or failure is an outcome, never a crash."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    clock = time.monotonic()
    try:
        params = coerce_parameters(name, given)
        result = run_flow(
            name,
            manifest,
            folder,
            parameters=params,
            timeout=timeout,
            show_code=show_code,
            progress=False,
            environ=environ,
            extra_items=extra,
            as_of_from=judging["as_of_from"] if "as_of" in params else "",
            stale_after=judging["stale_after"],
            cache_run=judging["cache_run"],
        )
        code, verdict, error = result.exit_code, result.verdict, result.error
    except IncidentkitError as err:  # refused before the notebook, or its artifacts rejected
        code, verdict, error = err.exit_code, "INCOMPLETE_EVIDENCE", f"{type(err).__name__}: {err}"
        failed_findings(name, error, given).write(folder / "findings.json")
    except Exception as err:  # noqa: BLE001 - one flow's bug must not lose the others' reports
        signum = stopping.requested()
        if signum is not None:  # its kernel was killed while it started
            return _interrupted(root, name, Interrupted(signum))
        code, verdict, error = Exit.FAILURE, "INCOMPLETE_EVIDENCE", internal_error_text(err)
        failed_findings(name, error, given).write(folder / "findings.json")
    return FlowOutcome(
        name,
        code,
        verdict,
        _files(root, name),
        dict(given),
        time.monotonic() - clock,
        error,
        _top_finding(folder / "findings.json"),
    )


def _files(root: Path, name: str) -> dict[str, str | None]:
    """A flow's report, findings and notebook relative to ``root`` (None: not written)."""
    return {
        kind: f"{name}/{file}" if (root / name / file).is_file() else None
        for kind, file in (
            ("report", f"{name}.html"),
            ("findings", "findings.json"),
            ("notebook", f"{name}.ipynb"),
        )
    }


def _top_finding(path: Path) -> dict[str, Any] | None:
    """The most severe item of a findings.json (the first of equals), as id, severity, title."""
    try:
        items = Findings.read(path).items
    except (OSError, IncidentkitError):
        return None
    if not items:
        return None
    top = min(items, key=lambda item: item.severity.rank)
    return _finding_dict(top)


def _finding_dict(item: Finding) -> dict[str, Any]:
    return {"id": item.id, "severity": item.severity.value, "title": item.title}


def _window_text(window: Window | None, as_of: pd.Timestamp | None) -> list[str] | None:
    """The window read, cut at as_of as the flows' findings show it."""
    if window is None:
        return None
    end = window.end if as_of is None else min(window.end, as_of)
    return [iso_text(window.start), iso_text(end)]


def status_of(code: int) -> str:
    """The word for an exit code in ``summary.json`` (``clean``, ``failure``, ...)."""
    try:
        return Exit(code).status
    except ValueError:
        return "failure"


def _summary(
    context: Mapping[str, Any],
    outcomes: Sequence[FlowOutcome],
    skipped: Mapping[str, str],
    *,
    pending: Sequence[str],
    stopped: Interrupted | None = None,
) -> dict[str, Any]:
    ran = [o.exit_code for o in outcomes]
    code = max(ran) if ran or pending else Exit.INCOMPLETE_EVIDENCE  # nothing ran: no verdict
    if stopped is not None:
        code = stopped.exit_code
    return {
        "schema": SUMMARY_SCHEMA,
        "generated_by": generator(),
        **context,
        "finished_at": None if pending else iso_text(pd.Timestamp.now(tz="UTC")),
        "status": status_of(code),
        "exit_code": int(code),
        "flows": {o.flow: o.to_dict() for o in outcomes},
        "pending": list(pending),
        "skipped": dict(skipped),
    }


def write_summary(root: Path, summary: Mapping[str, Any]) -> Path:
    """``root/summary.json``, replaced atomically (a reader never sees half a document), with
    every remembered secret masked."""
    text = json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
    return write_atomic(root / "summary.json", scrub_text(text))


def internal_error_text(err: BaseException) -> str:
    """How a failure outside the kit's family reads: ``internal error: ... (please report)``,
    or ``cannot write PATH: disk full`` for an ``OSError``; secrets masked."""
    if isinstance(err, OSError):
        reason = _WRITE_REASONS.get(err.errno or 0, err.strerror or str(err))
        where = final_name(err.filename) if err.filename else "the results"
        return scrub_text(f"cannot write {where}: {reason}")
    return scrub_text(f"internal error: {type(err).__name__}: {err} (please report)")


_WRITE_REASONS = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}


def refused_summary(root: Path, error: BaseException, parameters: Mapping[str, str]) -> Path:
    """The summary.json of a ``run all`` that stopped before any flow ran (a bad manifest, a
    ``-p`` no flow has, an internal error): a scheduler that parses it always finds one, never
    an earlier run's."""
    if isinstance(error, IncidentkitError):
        code, text = error.exit_code, f"{type(error).__name__}: {error}"
    else:
        code, text = Exit.FAILURE, internal_error_text(error)
    return write_summary(
        root,
        {
            "schema": SUMMARY_SCHEMA,
            "generated_by": generator(),
            "status": status_of(code),
            "exit_code": int(code),
            "error": text,
            "parameters": dict(parameters),
            "flows": {},
            "pending": [],
            "skipped": {},
        },
    )


_VERDICT_COLOUR = {
    "CLEAN": "#1a7f37",
    "ACTION_NEEDED": "#b35900",
    "INCOMPLETE_EVIDENCE": "#a40e26",
}


def write_index(root: Path, summary: Mapping[str, Any]) -> Path:
    """``root/index.html``: a plain standalone page, one row per flow with links."""
    esc = html.escape
    rows = []
    for name, flow in summary["flows"].items():
        top = flow["top_finding"]
        links = " · ".join(
            f'<a href="{esc(flow[kind])}">{label}</a>'
            for kind, label in (("report", "report"), ("findings", "findings.json"))
            if flow.get(kind)
        )
        verdict = flow["verdict"] or "—"
        colour = _VERDICT_COLOUR.get(verdict, "#333")
        detail = esc(top["title"]) if top else ""
        if flow["error"]:
            detail = f"{detail}<br><small>{esc(flow['error'])}</small>"
        first = f'<a href="{esc(flow["report"])}">{esc(name)}</a>' if flow["report"] else esc(name)
        rows.append(
            f"<tr><td>{first}</td>"
            f'<td style="color:{colour}"><b>{esc(verdict)}</b> (exit {flow["exit_code"]})</td>'
            f"<td>{detail}</td><td>{links}</td></tr>"
        )
    skipped = "".join(
        f"<li><b>{esc(name)}</b>: {esc(reason)}</li>" for name, reason in summary["skipped"].items()
    )
    stale = summary.get("stale")
    banner = (
        f'<p class="warn"><b>{esc(stale["id"])}</b>: {esc(stale["title"])}</p>' if stale else ""
    )
    window = summary.get("window")
    facts = [
        ("evidence", summary.get("evidence")),
        ("as of", summary.get("as_of") or "each flow: its window's end"),
        ("window", " .. ".join(window) if window else "none (everything stored)"),
        ("exit code", summary["exit_code"]),
        ("generated", f"{summary.get('finished_at')} by {summary['generated_by']}"),
    ]
    title = esc(summary.get("title") or "incident")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title} — every flow</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}}
table{{border-collapse:collapse;width:100%}}td,th{{border-bottom:1px solid #ddd;padding:.4em;
text-align:left;vertical-align:top}}.warn{{background:#fff4e5;padding:.6em;border-left:4px solid
#b35900}}dt{{font-weight:bold;float:left;width:7em}}dd{{margin-left:8em}}</style></head><body>
<h1>{title}</h1>
<dl>{"".join(f"<dt>{esc(k)}</dt><dd>{esc(str(v))}</dd>" for k, v in facts)}</dl>
{banner}
<h2>Flows</h2>
<table><tr><th>flow</th><th>verdict</th><th>top finding</th><th>files</th></tr>
{"".join(rows) or '<tr><td colspan="4">no flow ran</td></tr>'}
</table>
<h2>Skipped</h2>
{f"<ul>{skipped}</ul>" if skipped else "<p>none</p>"}
<p><a href="summary.json">summary.json</a></p>
</body></html>
"""
    return write_atomic(root / "index.html", scrub_text(page))
