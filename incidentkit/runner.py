"""Execute flow notebooks with papermill; write the executed notebook, HTML and findings.

The kernel is always the running interpreter (a kernelspec made for the run in a temporary
folder), never a committed absolute path. After the run the notebook and the HTML are scanned
for the credentials the manifest's ``env:`` URLs resolve to; a hit deletes them and fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from incidentkit import cache, outputs, stopping
from incidentkit.errors import Exit, NotebookError, ParameterError, exit_code_of
from incidentkit.findings import Finding, Findings, Provenance, Severity, Verdict
from incidentkit.flows import FLOWS
from incidentkit.manifest import (
    AS_OF_FROM_ENV,
    STALE_AFTER_ENV,
    did_you_mean,
    env_secrets,
    find_manifest,
    load_manifest,
)
from incidentkit.progress import QUIET_ENV

if TYPE_CHECKING:
    import pandas as pd


def _notebooks() -> Path:
    """The flow notebooks: inside the installed package (a wheel), else the checkout's."""
    packaged = Path(str(resources.files("incidentkit") / "notebooks"))
    return packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent / "notebooks"


NOTEBOOKS = _notebooks()
VERDICT_EXIT: Mapping[Verdict, Exit] = {
    Verdict.CLEAN: Exit.CLEAN,
    Verdict.ACTION_NEEDED: Exit.ACTION_NEEDED,
    Verdict.INCOMPLETE_EVIDENCE: Exit.INCOMPLETE_EVIDENCE,
}
"""The exit code of a flow's run, by the verdict its findings record."""
KERNEL = "incidentkit-python"


@dataclass(frozen=True)
class RunResult:
    """What one papermill run produced, the exit code it maps to, and why it stopped early."""

    exit_code: int
    notebook: Path
    html: Path | None
    findings: Path | None
    verdict: str | None
    error: str | None = None
    """The message of the error that stopped the notebook (None when it ran to the end)."""


def notebook_path(flow: str) -> Path:
    """The committed notebook of ``flow``."""
    if flow not in FLOWS:
        raise ParameterError(
            "unknown flow",
            value=flow,
            fix=f"{did_you_mean([flow], FLOWS)}use one of {', '.join(sorted(FLOWS))}",
        )
    path = NOTEBOOKS / FLOWS[flow].notebook
    if not path.is_file():
        raise NotebookError(
            "flow notebook not found",
            value=str(path),
            fix="reinstall incidentkit (the wheel ships its notebooks), or run it from a checkout",
        )
    return path


def declared_parameters(flow: str) -> dict[str, dict[str, Any]]:
    """The notebook's parameters as papermill sees them: name → type, default, help."""
    import papermill

    declared: dict[str, dict[str, Any]] = papermill.inspect_notebook(str(notebook_path(flow)))
    return declared


RUNNER_PARAMETERS = {
    "evidence": "give the evidence with --evidence PATH",
    "findings_path": "findings.json is written into --out DIR",
}
"""Notebook parameters the runner sets itself; a ``-p`` for one would be silently replaced."""


def coerce_parameters(flow: str, raw: Mapping[str, str]) -> dict[str, Any]:
    """Turn ``-p NAME VALUE`` strings into the types the notebook's parameters declare."""
    declared = declared_parameters(flow)
    values: dict[str, Any] = {}
    for name, text in raw.items():
        if name in RUNNER_PARAMETERS:
            raise ParameterError(
                f"-p {name} is set by the runner",
                value=text,
                fix=RUNNER_PARAMETERS[name],
            )
        if name not in declared:
            raise ParameterError(
                f"the {flow} notebook has no parameter",
                value=name,
                fix=f"{did_you_mean([name], declared)}its parameters are "
                f"{', '.join(sorted(declared))}",
            )
        kind = str(declared[name].get("inferred_type_name", "None"))
        values[name] = _coerce(name, kind, text)
    return values


_COERCE_FIX = {
    "int": "give a whole number, e.g. -p {name} 3",
    "float": "give a number, e.g. -p {name} 60",
    "bool": "give true or false, e.g. -p {name} true",
    "dict": 'give a JSON object, e.g. -p {name} \'{{"sendInvoice": '
    '"send-invoice:{{invoiceId}}"}}\'',
    "list": 'give a JSON list, e.g. -p {name} \'["a", "b"]\', or names separated by '
    "commas, e.g. -p {name} a,b",
}


def _coerce(name: str, kind: str, text: str) -> Any:
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "bool":
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("true", "1", "yes")
        if kind == "list" and not text.strip().startswith("["):
            return [part.strip() for part in text.split(",") if part.strip()]  # a,b
        if kind in ("dict", "list"):
            value = json.loads(text)
            if type(value).__name__ != kind:
                raise ValueError(text)
            return value
    except ValueError as err:
        raise ParameterError(
            f"parameter {name} must be {kind}",
            value=text,
            fix=_COERCE_FIX.get(kind, "").format(name=name),
        ) from err
    return text


@contextmanager
def _run_kernel(env: Mapping[str, str] | None = None) -> Iterator[type[Any]]:
    """The kernel manager of one run, with its own private temporary folder (removed after).

    The folder holds a kernelspec for the running interpreter, written by ipykernel (never a
    committed absolute path), with ``env`` for the kernel process, and the IPC sockets. Nothing
    process-wide changes (no ``JUPYTER_PATH``, no working directory), so several runs can
    execute at once in one process. The kernel logs only what is critical: its own log lines
    would land in the user's terminal between the kit's (jupyter_client interrupts a kernel
    before shutting it down, and a kernel interrupted as it starts logs the KeyboardInterrupt).
    """
    from ipykernel.kernelspec import make_ipkernel_cmd, write_kernel_spec

    folder = Path(tempfile.mkdtemp(prefix="incidentkit-kernel-"))
    manager: Any = None
    try:
        write_kernel_spec(
            folder / "kernels" / KERNEL,
            overrides={
                "display_name": "incidentkit (running interpreter)",
                "env": dict(env or {}),
                "argv": make_ipkernel_cmd(extra_arguments=["--IPKernelApp.log_level=CRITICAL"]),
            },
        )
        manager = _ipc_kernel_manager(folder)
        yield manager
    finally:
        if manager is not None:
            manager.close_clients()
        shutil.rmtree(folder, ignore_errors=True)


def _ipc_kernel_manager(folder: Path) -> type[Any]:
    """A kernel manager that talks to the kernel over IPC (Unix sockets), not TCP, finds the
    run's kernelspec in ``folder/kernels``, and registers its kernel with
    :mod:`incidentkit.stopping` while it runs.

    The kernel then listens on no network port at all, and ipykernel has no reason to warn
    "running over TCP without encryption". The sockets live in a private temporary folder,
    never beside the notebook (which may sit in a read-only site-packages): ``folder``, which
    the caller removes.

    The class keeps the kernel clients it made, and ``close_clients()`` closes their sockets.
    A stop signal raises in the middle of the client's event loop, so nbclient's own clean-up
    never runs; left to the garbage collector, a client's ``__del__`` terminates its zmq
    context while a socket already being collected is still open, and that never returns: the
    stopped command would hang at exit after writing its findings.
    """
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class IPCKernelManager(AsyncKernelManager):
        clients: ClassVar[list[Any]] = []

        @classmethod
        def close_clients(cls) -> None:
            """Stop every client's channels and close its context's sockets (no linger: the
            kernel is gone or done); a closed client's ``__del__`` then has nothing to do."""
            while cls.clients:
                client = cls.clients.pop()
                with contextlib.suppress(Exception):
                    client.stop_channels()
                context = client.context
                if getattr(client, "_created_context", False) and not context.closed:
                    context.destroy(linger=0)

        def client(self, **kw: Any) -> Any:
            made = super().client(**kw)
            self.clients.append(made)
            return made

        @default("transport")
        def _transport_default(self) -> str:
            return "ipc"

        @default("ip")
        def _ip_default(self) -> str:
            return str(folder / "kernel")

        @default("kernel_spec_manager")
        def _kernel_spec_manager_default(self) -> KernelSpecManager:
            return KernelSpecManager(kernel_dirs=[str(folder / "kernels")])

        async def _async_pre_start_kernel(self, **kw: Any) -> tuple[list[str], dict[str, Any]]:
            # The kernel's output travels over its sockets: its own stdout and stderr are not
            # the command's, so a kernel that outlives a stop cannot hold the command's pipes
            # open (a caller reading them to the end would wait for it).
            cmd, options = await super()._async_pre_start_kernel(**kw)
            options.setdefault("stdout", subprocess.DEVNULL)
            options.setdefault("stderr", subprocess.DEVNULL)
            return cmd, options

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            with stopping.deferred():  # a signal kills it, so it is registered as it starts
                await super()._async_launch_kernel(kernel_cmd, **kw)
                pid = getattr(self.provisioner, "pid", None)
                if isinstance(pid, int):
                    stopping.register(id(self), stopping.kill_process_group(pid))

        async def _async_cleanup_resources(self, restart: bool = False) -> None:
            stopping.unregister(id(self))
            await super()._async_cleanup_resources(restart=restart)

    return IPCKernelManager


def check_sources(manifest_path: Path, environ: Mapping[str, str]) -> list[str]:
    """Resolve every ``env:`` URL of the manifest now (a missing variable is a usage error
    before any kernel starts) and return the secrets a run's artifacts must never contain:
    every rendering of every value the manifest names with ``env:``."""
    manifest = load_manifest(manifest_path)
    for spec in manifest.sources.values():
        if spec.url_ref is not None and spec.url_ref.startswith("env:"):
            spec.url(environ)
    return env_secrets(manifest, environ)


def scan_for_secrets(paths: list[Path], secrets: list[str]) -> list[Path]:
    """The artifacts among ``paths`` that contain any of ``secrets``."""
    leaked = []
    for path in paths:
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            if any(secret and secret in text for secret in secrets):
                leaked.append(path)
    return leaked


REPORT_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""
"""nbconvert's lab page without its scripts: require.js, MathJax and mermaid come from a CDN,
and MathJax would typeset a ``$...$`` in evidence text as TeX. A report is read offline, in
incident channels, and nothing in it runs."""


def render_html(
    notebook: Path, html: Path, *, show_code: bool, findings: Path | None = None, flow: str = ""
) -> None:
    """A standalone HTML report of an executed notebook (code hidden unless asked).

    With ``findings`` it opens with their summary block (verdict, app, window, counts, first
    actions) and the page is titled by the incident and the flow. The page loads no script
    (:data:`REPORT_TEMPLATE`).
    """
    import jinja2
    import nbformat
    from nbconvert import HTMLExporter

    from incidentkit.report import summary_html

    nb = nbformat.read(str(notebook), as_version=4)
    title = "incident report"
    if findings is not None and findings.is_file():
        document = Findings.read(findings)
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(summary_html(document)))
        title = f"{document.evidence.title or 'incident'} — {flow or document.flow}"
    exporter = HTMLExporter(
        exclude_input=not show_code,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        extra_loaders=[jinja2.DictLoader({"incidentkit-report.html.j2": REPORT_TEMPLATE})],
        template_file="incidentkit-report.html.j2",
    )
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})
    html.write_text(body, encoding="utf-8")


def run_flow(
    flow: str,
    evidence: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    parameters: Mapping[str, Any] | None = None,
    timeout: int = 600,
    show_code: bool = False,
    progress: bool = True,
    environ: Mapping[str, str] | None = None,
    extra_items: Sequence[Finding] = (),
    as_of_from: str = "",
    stale_after: pd.Timedelta | None = None,
    cache_run: str | None = None,
) -> RunResult:
    """Execute ``flow`` against ``evidence``; write notebook, HTML and findings into ``out``.

    A non-empty ``as_of`` parameter is also the moment a relative manifest window ends at (the
    flow's steps open the manifest with it); ``as_of_from`` (``--as-of``, ``-p as_of``) is
    where it came from and ``stale_after`` (``--stale-after``)
    how far it may lie past the evidence's end: the flow's report says the one and judges ages
    by the other (:data:`~incidentkit.manifest.AS_OF_FROM_ENV`, ``STALE_AFTER_ENV``).
    ``extra_items`` (the scheduler's ``run/stale-evidence``) are added to the findings before
    the report is rendered; any of them that needs action makes the verdict INCOMPLETE_EVIDENCE.

    Safe to call from several threads at once for different ``out`` folders.
    """
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    source = notebook_path(flow)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0:
        raise ParameterError(
            "--timeout must be a positive number of seconds",
            value=timeout,
            fix="give the seconds one cell may take, e.g. --timeout 600",
        )
    manifest = find_manifest(evidence).resolve()
    env = os.environ if environ is None else environ
    secrets = check_sources(manifest, env)  # bad manifest or unset variable: exit 3, no kernel
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ParameterError(
            "--out names a file, not a folder",
            value=str(out_dir),
            fix="give a folder for the notebook, the report and findings.json (it is created)",
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    executed = (out_dir / f"{flow}.ipynb").resolve()
    html = out_dir / f"{flow}.html"
    findings = out_dir / "findings.json"
    findings.unlink(missing_ok=True)
    params = {
        **(parameters or {}),
        "evidence": str(manifest),
        "findings_path": str(findings.resolve()),
    }
    as_of = str(params.get("as_of") or "").strip()
    failure: tuple[int, str] | None = None  # (exit code, message)
    kernel_env = {QUIET_ENV: "1", cache.KEEP_ENV: "1"}  # no bar in a report; keep parses
    if cache_run:  # a run of several flows: its database sources are read once, for all
        kernel_env[cache.RUN_ENV] = cache_run
    if as_of and as_of_from:
        kernel_env[AS_OF_FROM_ENV] = as_of_from
    if stale_after is not None:
        kernel_env[STALE_AFTER_ENV] = str(stale_after.total_seconds())
    # papermill saves the notebook after every cell: it writes a temporary name, and only a
    # notebook that ran to its end (or to its failing cell) is renamed into place
    try:
        with _run_kernel(kernel_env) as manager, outputs.partial(executed) as running:
            try:
                papermill.execute_notebook(
                    str(source),
                    str(running),
                    parameters=params,
                    kernel_name=KERNEL,
                    progress_bar=progress,
                    execution_timeout=timeout,
                    # the kernel's working directory, without papermill's process-wide chdir
                    resources={"metadata": {"path": str(source.parent)}},
                    kernel_manager_class=manager,
                )
            except Exception as err:
                signum = stopping.requested()
                if signum is not None:  # the run is stopping: this thread's kernel was killed
                    raise stopping.Interrupted(signum) from err
                if isinstance(err, PapermillExecutionError):
                    failure = exit_code_of(err.ename), f"{err.ename}: {err.evalue}"
                elif isinstance(err, CellTimeoutError):
                    failure = 4, f"timed out after {timeout} s in {_running_cell(running)}"
                elif isinstance(err, DeadKernelError):
                    failure = 4, f"the kernel died in {_running_cell(running)} ({err})"
                else:
                    raise
            else:
                failure = notebook_failure(running)
            if failure is not None:
                failed_findings(flow, failure[1], params).write(findings)
            if extra_items and findings.is_file():
                with_items(Findings.read(findings), extra_items).write(findings)
            with outputs.partial(html) as page:
                render_html(running, page, show_code=show_code, findings=findings, flow=flow)
                others = [p for p in out_dir.iterdir() if p.is_file() and p not in (running, page)]
                leaked = scan_for_secrets([running, page, *others], secrets)
                if leaked:  # neither file reaches its name; findings.json is removed
                    findings.unlink(missing_ok=True)
                    shown = [str({running: executed, page: html}.get(p, p)) for p in leaked]
                    raise NotebookError(
                        "a credential from the environment appeared in the run's artifacts; "
                        "they were deleted",
                        value=shown,
                        fix="never print connection URLs or engines in a notebook; report "
                        "this as a bug",
                    )
    except stopping.Interrupted as stop:  # nothing half-run is left under its name
        interrupted_findings(flow, stop.signum, params).write(findings)
        if threading.current_thread() is threading.main_thread():
            raise
        message = f"interrupted by {stop.signal_name}"
        return RunResult(stop.exit_code, executed, None, findings, None, message)
    if failure is not None:
        code, message = failure
        return RunResult(code, executed, html, findings, "INCOMPLETE_EVIDENCE", message)
    if not findings.is_file():
        raise NotebookError(
            "the notebook recorded no findings",
            value=str(findings),
            fix="the notebook's last cell must call report.record(findings, findings_path)",
        )
    verdict = Findings.read(findings).verdict
    return RunResult(VERDICT_EXIT[verdict], executed, html, findings, verdict.value)


def notebook_failure(executed: Path) -> tuple[int, str] | None:
    """What papermill's own flags say failed in an executed notebook that it returned without
    raising, as (exit code 4, message); None when every cell ran clean.

    papermill raises for most failed cells, but not for all: a cell that ran ``sys.exit()`` or
    ``sys.exit(0)`` stops the run silently. Here any error output (also one papermill or
    nbclient let through: ``allow_errors``, a ``raises-exception`` tag), any cell papermill
    flagged with an exception or as failed, and the notebook's own exception flag count.
    """
    import nbformat

    nb = nbformat.read(str(executed), as_version=4)
    for number, cell in enumerate(nb.cells, start=1):
        if cell.get("cell_type") != "code":
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        flags = cell.get("metadata", {}).get("papermill", {})
        if errors or flags.get("exception") is True or flags.get("status") == "failed":
            shown = _cell_name(number, cell)
            if errors:
                return 4, f"{errors[0].get('ename')}: {errors[0].get('evalue')} in {shown}"
            return 4, f"papermill flagged an exception in {shown}"
    if nb.metadata.get("papermill", {}).get("exception") is True:
        return 4, "papermill flagged an exception in the notebook"
    return None


def with_items(document: Findings, items: Sequence[Finding]) -> Findings:
    """``document`` with ``items`` added; one that needs action makes the verdict
    INCOMPLETE_EVIDENCE (the evidence does not support the verdict as it stood)."""
    incomplete = any(item.needs_action for item in items)
    verdict = Verdict.INCOMPLETE_EVIDENCE if incomplete else document.verdict
    return replace(document, verdict=verdict, items=(*document.items, *items))


def failed_findings(flow: str, message: str, parameters: Mapping[str, Any]) -> Findings:
    """The findings of a run that stopped early: INCOMPLETE_EVIDENCE and the error's text.

    A scheduler that parses ``findings.json`` always finds a document; its one item
    ``run/error`` says what stopped the run (the exit code says what kind of failure it was).
    """
    item = Finding(
        "run/error",
        Severity.CRITICAL,
        f"the {flow} run stopped before its verdict",
        message,
        "Fix what the message says (the executed notebook shows the failing cell), then run again.",
    )
    shown = {k: v for k, v in parameters.items() if k not in ("evidence", "findings_path")}
    provenance = Provenance(parameters={"flow_parameters": shown})
    return Findings(flow, Verdict.INCOMPLETE_EVIDENCE, {}, (item,), provenance)


def interrupted_findings(flow: str, signum: int, parameters: Mapping[str, Any]) -> Findings:
    """The findings of a run stopped by a signal: INCOMPLETE_EVIDENCE, ``run/interrupted``."""
    name = signal.Signals(signum).name
    item = Finding(
        "run/interrupted",
        Severity.CRITICAL,
        f"the {flow} run was interrupted by {name} before its verdict",
        f"The run received {name} and stopped its notebook; no verdict was reached.",
        "Run the flow again.",
    )
    shown = {k: v for k, v in parameters.items() if k not in ("evidence", "findings_path")}
    provenance = Provenance(parameters={"flow_parameters": shown})
    return Findings(flow, Verdict.INCOMPLETE_EVIDENCE, {}, (item,), provenance)


def _running_cell(executed: Path) -> str:
    """``cell K (tag)`` of the cell that was running when the run stopped, as papermill saved it."""
    import nbformat

    try:
        nb = nbformat.read(str(executed), as_version=4)
    except (OSError, ValueError):
        return "an unknown cell"
    started = [
        (number, cell)
        for number, cell in enumerate(nb.cells, start=1)
        if cell.get("metadata", {}).get("papermill", {}).get("start_time")
    ]
    if not started:
        return "an unknown cell"
    number, cell = started[-1]  # the last cell that began: papermill stops there
    return _cell_name(number, cell)


def _cell_name(number: int, cell: Any) -> str:
    """``cell K (tag)``."""
    tags = [t for t in cell.get("metadata", {}).get("tags", []) if t != "injected-parameters"]
    return f"cell {number}" + (f" ({', '.join(tags)})" if tags else "")


def new_notebook(
    incident: str,
    flow: str,
    evidence: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    parameters: Mapping[str, Any] | None = None,
) -> Path:
    """Write a parameterised, unexecuted copy of ``flow`` for one incident; returns its path."""
    import papermill

    source = notebook_path(flow)
    manifest = find_manifest(evidence).resolve()
    load_manifest(manifest)
    folder = Path(out) if out is not None else Path("incidents") / incident
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{flow}.ipynb"
    if target.exists():
        raise ParameterError(
            "notebook already exists",
            value=str(target),
            fix="choose another incident name or remove the file",
        )
    params = {
        **(parameters or {}),
        "evidence": str(manifest),
        "findings_path": str((folder / "findings.json").resolve()),
    }
    papermill.execute_notebook(  # prepare only: no kernel starts, no kernelspec is read
        str(source),
        str(target),
        parameters=params,
        prepare_only=True,
        kernel_name=KERNEL,
        progress_bar=False,
    )
    _drop_kernelspec(target)
    return target


def _drop_kernelspec(path: Path) -> None:
    """Point the copy at the standard python3 kernel, not the run's temporary one."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, str(path))
