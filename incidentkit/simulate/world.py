"""The simulation context: one random generator, ids, agent descriptions and run statistics."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from incidentkit.simulate.model import Ids, LedgerRow

MODEL = "gemini-2.5-flash"
LEASE_MS = 60_000
HEARTBEAT_MS = 20_000


@dataclass(frozen=True, slots=True)
class Session:
    """One ADK session: app, user, session id."""

    app: str
    user: str
    id: str


@dataclass(frozen=True, slots=True)
class RunStat:
    """What the diagnostics plugin saw of one invocation (for truth figures)."""

    app: str
    invocation_id: str
    start: int
    end: int | None
    llm_calls: int
    outcome: str | None  # "ok", "error" or None (no run.end)


@dataclass
class Billing:
    """The fake billing system: invoices sent and notifications, per invoice id."""

    sent: dict[str, int] = field(default_factory=dict)
    notified: dict[str, int] = field(default_factory=dict)

    def send(self, invoice: str) -> None:
        self.sent[invoice] = self.sent.get(invoice, 0) + 1

    def notify(self, invoice: str) -> None:
        self.notified[invoice] = self.notified.get(invoice, 0) + 1


@dataclass
class World:
    """Shared state of one simulation run. Everything random comes from ``rng``."""

    rng: random.Random
    descriptions: dict[str, str] = field(default_factory=dict)
    stats: list[RunStat] = field(default_factory=list)
    keep_stats: bool = True
    counters: dict[str, int] = field(default_factory=dict)
    billing: Billing = field(default_factory=lambda: Billing())
    tracing: bool = True
    """Whether new invocations are traced (background tail sampling decides per invocation)."""
    open_rows: list[LedgerRow] = field(default_factory=list)
    """Ledger rows not DONE/FAILED/PARKED, known once the pack is written."""

    def __post_init__(self) -> None:
        self.ids = Ids(self.rng)

    def session(self, app: str, user: str | None = None) -> Session:
        """A new session id (ADK Java default: a random UUID) for ``user``."""
        return Session(app, user or self.user_id(), self.ids.uuid())

    def next(self, name: str, first: int = 1) -> int:
        """The next number of a named sequence (invoice numbers, ...)."""
        value = self.counters.get(name, first)
        self.counters[name] = value + 1
        return value

    def user_id(self) -> str:
        return f"u-{self.rng.randrange(10_000, 99_999)}"

    def describe(self, agent: str) -> str:
        return self.descriptions.get(agent, f"The {agent.replace('_', ' ')}.")

    def between(self, low: int, high: int) -> int:
        """A whole number in ``[low, high]`` (faster than ``randint``; same determinism)."""
        return low + int(self.rng.random() * (high - low + 1))

    def llm_ms(self, low: int = 450, high: int = 1500) -> int:
        return self.between(low, high)

    def tool_ms(self, low: int = 40, high: int = 400) -> int:
        return self.between(low, high)
