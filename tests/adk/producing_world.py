"""The invoicing app of docs/producing-evidence.md, run through the real google-adk with the
example plugin (``docs/producing/incidentkit_plugin.py``), into a folder the kit can read.

:func:`build_producing_world` first crashes two workers: this file run as a script, in a child
process killed with SIGKILL once the plugin has renewed its lease, one after ``send_invoice``
reached the billing system (before the journal's DONE: W4), one during a model call (W2). When
their leases have run out it runs three invocations here: one completes, one fails in a tool,
one pauses on a long-running tool. The ADK session store is ``DatabaseSessionService`` on
SQLite; the ledger and the journal go to the database the caller gives (tables created); each
worker writes its own diagnostics log. Nothing touches the network: the model is scripted.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import sqlalchemy as sa
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService, Session
from google.adk.tools import LongRunningFunctionTool
from google.genai import types
from pydantic import Field, PrivateAttr

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_FILE = ROOT / "docs" / "producing" / "incidentkit_plugin.py"
APP = "invoicing"
USER = "customer-7"
AGENT = "invoice_agent"
KEY_TEMPLATE = "send-invoice:{invoice_id}"
LEDGER_ENV = "IK_PRODUCING_LEDGER"
CRASH_LEASE = timedelta(seconds=2)
"""The crashing workers' lease: short, so it has run out when this process's runs begin."""
HANG = "hang"
"""A script entry: the model call never returns (the worker dies in it)."""
MODEL_ERROR = "model error"
"""A script entry: the model call fails."""
WAIT_S = 120.0
"""How long a worker may take to reach its crash point (importing ADK is slow on a busy host)."""


def plugin_module() -> ModuleType:
    """``docs/producing/incidentkit_plugin.py``, imported from its file once."""
    name = "incidentkit_plugin"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, PLUGIN_FILE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


ik = plugin_module()

# --- the scripted model and the tools ---------------------------------------------------------


class ScriptedLlm(BaseLlm):
    """A model that answers each call with the next scripted response (or never, at HANG)."""

    script: list[Any] = Field(default_factory=list)
    ready: str = ""
    _served: int = PrivateAttr(default=0)

    @property
    def unused(self) -> int:
        return len(self.script) - self._served

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if self._served >= len(self.script):
            raise AssertionError("the script has no response left")
        response = self.script[self._served]
        self._served += 1
        if response == HANG:
            Path(self.ready).write_text("model call in flight", encoding="utf-8")
            await asyncio.Event().wait()
        if response == MODEL_ERROR:
            raise ConnectionResetError("the model endpoint reset the connection")
        yield response.model_copy(deep=True)


def model_call(name: str, **args: Any) -> LlmResponse:
    """The model asks for one tool call (ADK gives it an ``adk-<uuid>`` id)."""
    part = types.Part(function_call=types.FunctionCall(name=name, args=args))
    return LlmResponse(content=types.Content(role="model", parts=[part]))


def model_text(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


@dataclass
class Billing:
    """The downstream system: one file per invoice sent; ``hang`` makes the tool stall after
    sending (the worker dies there), writing ``ready`` first."""

    outbox: Path
    hang: bool = False
    ready: str = ""


BILLING = Billing(Path("outbox"))


@ik.side_effect(KEY_TEMPLATE)
def send_invoice(invoice_id: str) -> dict[str, str]:
    """Send an invoice to the customer."""
    BILLING.outbox.mkdir(parents=True, exist_ok=True)
    (BILLING.outbox / f"{invoice_id}.json").write_text(json.dumps({"sent": invoice_id}))
    if BILLING.hang:
        Path(BILLING.ready).write_text("sent; journal not yet DONE", encoding="utf-8")
        threading.Event().wait()
    return {"invoice_id": invoice_id, "status": "sent"}


def lookup_customer(customer_id: str) -> dict[str, str]:
    """Look a customer up in the CRM."""
    raise LookupError(f"no customer {customer_id}\nthe CRM answered 404")


def request_approval(invoice_id: str, amount: int) -> None:
    """Ask a person to approve a large invoice; the answer comes later."""
    return None


def agent(script: list[Any], ready: str = "") -> tuple[LlmAgent, ScriptedLlm]:
    model = ScriptedLlm(model="scripted", script=script, ready=ready)
    root = LlmAgent(
        name=AGENT,
        model=model,
        instruction="Send invoices.",
        tools=[send_invoice, lookup_customer, LongRunningFunctionTool(func=request_approval)],
    )
    return root, model


def user_message(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


# --- one worker ----------------------------------------------------------------------------------


@contextmanager
def diagnostics_to(path: Path) -> Iterator[None]:
    """The plugin's diagnostics lines go to ``path`` for the ``with`` block."""
    logger = logging.getLogger(ik.DIAGNOSTICS)
    handler, level = ik.diagnostics_handler(str(path)), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()


async def run_worker(
    store: str,
    ledger_url: str,
    owner: str,
    runs: list[tuple[str, str]],
    script: list[Any],
    *,
    lease: timedelta,
    ready: str = "",
) -> dict[str, BaseException | None]:
    """Run ``runs`` (session id, message) in order through one Runner with the plugin; the
    error each run raised, by session id."""
    engine = sa.create_engine(ledger_url, poolclass=sa.pool.NullPool)
    plugin = ik.IncidentkitPlugin(
        ik.Ledger(engine, owner=owner, lease=lease),
        ik.Journal(engine),
        heartbeat=timedelta(seconds=0.2),
        many_llm_calls_every=2,  # the completing run's 2 calls log one warning
    )
    root, model = agent(script, ready)
    app = App(name=APP, root_agent=root, plugins=[plugin])
    runner = Runner(app=app, session_service=DatabaseSessionService(db_url=store))
    errors: dict[str, BaseException | None] = {}
    try:
        for session_id, text in runs:
            try:
                async for _ in runner.run_async(
                    user_id=USER, session_id=session_id, new_message=user_message(text)
                ):
                    pass
                errors[session_id] = None
            except Exception as err:  # noqa: BLE001 - the caller checks which run failed how
                errors[session_id] = err
        if model.unused:
            raise AssertionError(f"{model.unused} scripted response(s) unused")
    finally:
        await runner.close()
        await runner.session_service.close()  # type: ignore[attr-defined]
        engine.dispose()
    return errors


def _worker_main(config: str) -> None:
    """A child worker: one run that stalls at its crash point until it is killed."""
    args = json.loads(config)
    BILLING.outbox, BILLING.ready = Path(args["outbox"]), args["ready"]
    BILLING.hang = args["crash"] == "tool"
    script = [model_call("send_invoice", invoice_id="INV-77")] if BILLING.hang else [HANG]
    with diagnostics_to(Path(args["log"])):
        asyncio.run(
            run_worker(
                args["store"],
                os.environ[LEDGER_ENV],
                args["owner"],
                [(args["session_id"], args["message"])],
                script,
                lease=CRASH_LEASE,
                ready=args["ready"],
            )
        )
    raise SystemExit("the worker reached no crash point")


# --- the world ---------------------------------------------------------------------------------

SCENARIOS = {
    # name: (owner, message)
    "crash_tool": ("worker-2", "Send invoice INV-77."),
    "crash_model": ("worker-3", "Summarise my invoices."),
    "done": ("worker-1", "Send invoice INV-1."),
    "failed": ("worker-1", "Who is customer C-404?"),
    "paused": ("worker-1", "Invoice INV-9 for 1200, please."),
    "model_failed": ("worker-1", "What do I owe?"),
}
LOCAL = ("done", "failed", "paused", "model_failed")
"""The scenarios run in this process, in this order, after the crashes."""
LOCAL_SCRIPT = [
    model_call("send_invoice", invoice_id="INV-1"),
    model_text("Invoice INV-1 is on its way."),
    model_call("lookup_customer", customer_id="C-404"),
    model_call("request_approval", invoice_id="INV-9", amount=1200),
    MODEL_ERROR,
]


@dataclass(frozen=True)
class World:
    """What the workers wrote, and ADK's own reading of the sessions afterwards."""

    folder: Path
    manifest: Path
    environ: dict[str, str]
    ledger_url: str
    sessions: dict[str, Session]
    """Each scenario's session as ``get_session`` returns it after every run."""
    errors: dict[str, BaseException | None]
    """What each local run raised, by scenario (:data:`LOCAL`)."""
    outbox: Path

    def owner(self, scenario: str) -> str:
        return SCENARIOS[scenario][0]


async def _create_sessions(store: str) -> dict[str, str]:
    service = DatabaseSessionService(db_url=store)
    try:
        return {
            name: (await service.create_session(app_name=APP, user_id=USER)).id
            for name in SCENARIOS
        }
    finally:
        await service.close()


async def _read_sessions(store: str, ids: dict[str, str]) -> dict[str, Session]:
    service = DatabaseSessionService(db_url=store)
    try:
        out = {}
        for name, session_id in ids.items():
            session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
            assert session is not None
            out[name] = session
        return out
    finally:
        await service.close()


def _ledger_row(ledger_url: str, session_id: str) -> Any:
    engine = sa.create_engine(ledger_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(ik.agent_run).where(ik.agent_run.c.session_id == session_id)
            ).all()
    finally:
        engine.dispose()
    return rows[0] if rows else None


def _as_utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)  # SQLite keeps UTC wall time


def _await_crash_point(child: subprocess.Popen[bytes], ready: Path, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready.exists():
        if child.poll() is not None:
            _, err = child.communicate()
            raise AssertionError(f"{what} exited early:\n{err.decode(errors='replace')}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} reached no crash point in {WAIT_S:.0f} s")
        time.sleep(0.05)


def _await_renewal(ledger_url: str, session_id: str, what: str) -> datetime:
    """Wait until the worker's heartbeat renewed its lease once; the lease's end."""
    deadline = time.monotonic() + WAIT_S
    while True:
        row = _ledger_row(ledger_url, session_id)
        if row is not None and row.updated_at > row.started_at:
            return _as_utc(row.lease_until)
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} never renewed its lease: {row}")
        time.sleep(0.05)


def _crash(folder: Path, store: str, ledger_url: str, ids: dict[str, str]) -> datetime:
    """Run the two crashing workers to their crash points, renewed once, and SIGKILL them;
    the latest lease end among them."""
    children = {}
    for name in ("crash_tool", "crash_model"):
        owner, message = SCENARIOS[name]
        config = {
            "store": store,
            "owner": owner,
            "session_id": ids[name],
            "message": message,
            "log": str(folder / f"{owner}.log"),
            "outbox": str(folder / "outbox"),
            "ready": str(folder / f"{name}.ready"),
            "crash": name.removeprefix("crash_"),
        }
        children[name] = subprocess.Popen(
            [sys.executable, __file__, json.dumps(config)],
            env={**os.environ, LEDGER_ENV: ledger_url},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    try:
        leases = []
        for name, child in children.items():
            _await_crash_point(child, folder / f"{name}.ready", f"worker {name}")
            leases.append(_await_renewal(ledger_url, ids[name], f"worker {name}"))
    finally:
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
            child.wait()
            if child.stderr is not None:
                child.stderr.close()
    for name, child in children.items():
        assert child.returncode == -signal.SIGKILL, (name, child.returncode)
    return max(leases)


def _manifest(folder: Path, ledger_url: str) -> tuple[Path, dict[str, str]]:
    if ledger_url.startswith("sqlite"):
        where, environ = f'path = "{Path(sa.make_url(ledger_url).database or "").name}"', {}
    else:
        where, environ = f'url = "env:{LEDGER_ENV}"', {LEDGER_ENV: ledger_url}
    logs = ", ".join(f'"{owner}.log"' for owner in sorted({o for o, _ in SCENARIOS.values()}))
    manifest = folder / "evidence.toml"
    manifest.write_text(
        f"""title = "evidence written by the example plugin"
timezone = "UTC"

[ledger]
{where}

[journal]
{where}

[events]
path = "adk.db"

[diagnostics]
paths = [{logs}]

[apps.{APP}]
terminal_agent = "{AGENT}"
key_templates = {{ send_invoice = "{KEY_TEMPLATE}" }}
attempts_cap = 3
""",
        encoding="utf-8",
    )
    return manifest, environ


def build_producing_world(folder: Path, ledger_url: str) -> World:
    """Crash two workers, then run three invocations here, all through the plugin.

    ``ledger_url`` is a sync SQLAlchemy URL of a database holding empty ``agent_run`` and
    ``tool_journal`` tables (for a SQLite URL, the file should sit in ``folder``).
    """
    folder.mkdir(parents=True, exist_ok=True)
    store = f"sqlite+aiosqlite:///{folder / 'adk.db'}"
    ids = asyncio.run(_create_sessions(store))
    leases_end = _crash(folder, store, ledger_url, ids)
    # The local runs begin once the dead workers' leases have run out: the evidence then goes
    # on past them, as a fleet's does after one worker dies.
    time.sleep(max(0.0, (leases_end - datetime.now(UTC)).total_seconds()) + 0.05)
    BILLING.outbox, BILLING.hang = folder / "outbox", False
    local = [(ids[name], SCENARIOS[name][1]) for name in LOCAL]
    with diagnostics_to(folder / "worker-1.log"):
        errors = asyncio.run(
            run_worker(
                store, ledger_url, "worker-1", local, LOCAL_SCRIPT, lease=timedelta(seconds=60)
            )
        )
    manifest, environ = _manifest(folder, ledger_url)
    return World(
        folder=folder,
        manifest=manifest,
        environ=environ,
        ledger_url=ledger_url,
        sessions=asyncio.run(_read_sessions(store, ids)),
        errors={name: errors[ids[name]] for name in LOCAL},
        outbox=folder / "outbox",
    )


if __name__ == "__main__":
    _worker_main(sys.argv[1])
