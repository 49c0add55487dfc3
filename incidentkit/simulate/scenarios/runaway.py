"""``runaway``: model calls per invocation, loops, and one invocation that hits maxLlmCalls.

Everything happens in one app, ``support``: its healthy traffic gives a p99 of about 9 model
calls per invocation (a measured p99 of 9 gives 30). On top: a transfer ping-pong
between two agents whose descriptions overlap, a tool answering "try again later" that the model
calls again with identical arguments, and a loop agent whose exit key no sub-agent writes, which
runs until ``maxLlmCalls`` (500) stops it; its trace, minutes long, is tail-sampled in pieces
and only the last piece (the limit error) is kept. Also errors that do not look like errors: a model
response carrying an errorCode, a model.error, a tool.error, an rx.undeliverable line.
"""

from __future__ import annotations

import math
from typing import Any

from incidentkit.simulate.model import Bundle, LogRecord, at, iso
from incidentkit.simulate.plan import Plan, Spec
from incidentkit.simulate.sampling import MEMORY_MS, errored_pieces
from incidentkit.simulate.scenarios.common import llm_call_figures
from incidentkit.simulate.script import Invocation
from incidentkit.simulate.traffic import Background
from incidentkit.simulate.world import World

WINDOW = (at("16:00"), at("16:40"))
APP = "support"
"""The app every runaway invocation belongs to: the flow judges one app's distribution."""
SESSIONS = 20
LIMIT = 500
PAIR = ("orders_agent", "refunds_agent")
DESCRIPTIONS = {
    "helpdesk_agent": "Routes customer requests to the right specialist.",
    "orders_agent": "Handles order problems, including refunds for orders.",
    "refunds_agent": "Handles refunds and any problem with an order.",
    "stock_agent": "Answers stock questions with check_stock.",
    "review_loop": "Revises a product description until the review approves it.",
    "writer_agent": "Rewrites the product description.",
    "critic_agent": "Reviews the description and records a verdict.",
}
EXIT_KEY = "review:approved"
RETRY_ARGS = {"sku": "kettle-blue", "warehouse": "LIS-1"}
SAMPLE = 0.15


def _turn(world: World, start: str, root: str, text: str) -> Invocation:
    """A user's turn at ``start`` in a new session of :data:`APP`."""
    return Invocation(world, world.session(APP), start=at(start), root=root, text=text)


def ping_pong(world: World) -> tuple[Bundle, list[str]]:
    inv = _turn(
        world, "16:03:12.400", "helpdesk_agent", "My order arrived broken, I want my money back."
    )
    agent = inv.agent("helpdesk_agent").transfer(PAIR[0])
    hops = [PAIR[0]]
    for hop in range(7):
        agent = agent.transfer(PAIR[(hop + 1) % 2])
        hops.append(agent.name)
    agent.say("I have opened a refund request for your order.")
    return inv.finish(), hops


def retries(world: World) -> tuple[Bundle, list[str]]:
    inv = _turn(world, "16:21:40.050", "stock_agent", "Is the blue kettle in stock in Lisbon?")
    agent = inv.agent("stock_agent")
    call_ids = []
    for _ in range(8):
        call = agent.request("check_stock", dict(RETRY_ARGS))
        agent.respond(call, {"status": "error", "message": "Service busy, try again later"})
        call_ids.append(call.call_id)
    agent.say("The stock service is not answering right now; please try again in a few minutes.")
    return inv.finish(), call_ids


def loop(world: World) -> Bundle:
    inv = _turn(world, "16:05:00.300", "review_loop", "Polish the description of the blue kettle.")
    loop_agent = inv.agent("review_loop")
    for n in range(LIMIT // 2):
        writer = loop_agent.sub("writer_agent")
        writer.say(
            f"Draft {n + 1}: a bright blue kettle.",
            ms=world.llm_ms(500, 1100),
            state_delta={"draft": f"v{n + 1}"},
        )
        writer.end()
        critic = loop_agent.sub("critic_agent")
        critic.say(
            "Needs work: tighten the first sentence.",
            ms=world.llm_ms(400, 900),
            state_delta={"review:verdict": "needs_work"},
        )
        critic.end()
    loop_agent.sub("writer_agent")  # its model call is refused: the 501st
    bundle = inv.fail_limit(LIMIT)
    # The trace runs for minutes: the tail sampler decides it in pieces and keeps only the
    # last one, which holds the limit error; the healthy pieces before it were not sampled.
    bundle.spans = errored_pieces(bundle.spans)
    return bundle


def quiet_errors(world: World) -> tuple[list[Bundle], dict[str, Any]]:
    """An errorCode on a normal run, a model.error, a tool.error and an rx.undeliverable."""
    inv = _turn(world, "16:10:20.000", "support_agent", "Summarise every order I placed this year.")
    event = inv.agent("support_agent").say(
        "Here is the summary of your orders: ...",
        error_code="MAX_TOKENS",
        error_message="The response was cut at the maximum output length.",
    )
    truncated = inv.finish()
    inv2 = _turn(world, "16:26:03.700", "support_agent", "Where is order ORD-40404?")
    agent = inv2.agent("support_agent")
    call = agent.request("order_lookup", {"order_id": "ORD-40404"})
    agent.tool_error(call, "java.net.SocketTimeoutException", "Read timed out", ms=5_000)
    tool_failed = inv2.fail(
        "java.net.SocketTimeoutException",
        "Read timed out",
        root_message="Error in runAsync Flowable execution",
    )
    inv3 = _turn(world, "16:31:45.210", "support_agent", "Cancel order ORD-51515.")
    agent3 = inv3.agent("support_agent")
    agent3.start_llm()
    message = "429 RESOURCE_EXHAUSTED: Quota exceeded for model gemini-2.5-flash"
    inv3.log(
        "ERROR",
        f"model.error inv={inv3.id} agent=support_agent",
        throwable=(
            f"com.google.genai.errors.ClientException: {message}",
            "\tat com.google.genai.Models.generateContent(Models.java:5126)",
            "\t... 27 common frames omitted",
        ),
    )
    model_failed = inv3.fail(
        "com.google.genai.errors.ClientException",
        message,
        root_message="Error in runAsync Flowable execution",
    )
    lost = at("16:33:02.871")
    undeliverable = Bundle(
        start=lost,
        logs=[
            LogRecord(
                lost,
                "ERROR",
                "rx.undeliverable",
                logger="c.e.agent.AgentServer",
                throwable=(
                    "java.io.IOException: Broken pipe",
                    "\tat java.base/sun.nio.ch.SocketDispatcher.write0(Native Method)",
                    "\t... 14 common frames omitted",
                ),
            )
        ],
    )
    facts = {
        "error_code_events": [
            {
                "event_id": event.event_id,
                "invocation_id": inv.id,
                "error_code": "MAX_TOKENS",
                "run_outcome": "ok",
            }
        ],
        "tool_errors": [
            {"invocation_id": inv2.id, "tool": "order_lookup", "call_id": call.call_id}
        ],
        "model_errors": [{"invocation_id": inv3.id, "agent": "support_agent"}],
        "run_errors": sorted([inv2.id, inv3.id]),
        "undeliverable": [iso(lost)],
    }
    return [truncated, tool_failed, model_failed, undeliverable], facts


def build(world: World, scale: int) -> Plan:
    world.descriptions.update(DESCRIPTIONS)
    pong, hops = ping_pong(world)
    retry, retry_calls = retries(world)
    limited = loop(world)
    quiet, errors = quiet_errors(world)
    core = [pong, retry, limited, *quiet]
    background = Background(
        start=at("16:00"),
        end=at("16:39"),
        sessions=SESSIONS * scale,
        apps=(APP,),
        weights=(1,),
        span_sample=SAMPLE,
    )

    def expected(w: World, events_format: str) -> dict[str, Any]:
        flagged = [b.events[0].invocation_id for b in (pong, retry, limited)]
        figures = llm_call_figures(w.stats, app=APP, exclude=flagged)
        return {
            "app_name": APP,
            "llm_calls": figures,
            "recommended_max_llm_calls": 5 * math.ceil(3 * figures["p99"] / 5),  # 27 -> 30
            "max_llm_calls": LIMIT,
            "limit_hits": [
                {
                    "invocation_id": limited.events[0].invocation_id,
                    "agent": "writer_agent",
                    "llm_calls": LIMIT,
                    "many_llm_calls_warnings": LIMIT // 20,
                    "error": (
                        f"Max number of llm calls limit of `{LIMIT}` exceeded"
                        if events_format == "adk-python"
                        else f"Max number of llm calls limit of {LIMIT} exceeded"
                    ),
                }
            ],
            "ping_pong": {
                "invocation_id": pong.events[0].invocation_id,
                "agents": list(PAIR),
                "transfers": hops,
                "descriptions": {a: DESCRIPTIONS[a] for a in PAIR},
            },
            "repeated_call": {
                "invocation_id": retry.events[0].invocation_id,
                "tool": "check_stock",
                "args": RETRY_ARGS,
                "repeats": len(retry_calls),
                "call_ids": retry_calls,
                "error_text": "try again later",
            },
            "loop": {
                "invocation_id": limited.events[0].invocation_id,
                "agent": "review_loop",
                "exit_key": EXIT_KEY,
                "keys_written": ["draft", "review:verdict"],
            },
            "errors": errors,
            "spans_sampling": (
                f"tail: errored traces kept, {SAMPLE:.0%} of the rest; a trace is decided in "
                f"pieces of {MEMORY_MS // 1000} s (the sampler's memory): the loop's trace keeps "
                "only its last piece, with the limit error; count model calls from events or "
                "run.end llmCalls"
            ),
        }

    return Plan(core=core, background=background, expected=expected, as_of=WINDOW[1])


SPEC = Spec(
    "runaway",
    "Runaway model calls: ping-pong, identical retries, an endless loop hitting maxLlmCalls",
    WINDOW,
    build,
)
