"""A JFR recording holds the process's environment, system properties, JVM arguments and the
host's process list. None of it may reach a frame, a reject, a warning or an artifact."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import read_run

from incidentkit.evidence import Evidence
from incidentkit.manifest import parse_manifest
from incidentkit.redact import remember_url

DATA = Path(__file__).resolve().parent.parent / "data" / "jfr"
CANARIES = {
    "env": "CANARY-env-7f3a91",
    "property": "CANARY-prop-2c8e44",
    "process": "CANARY-proc-9b1d07",
    "jvm_args": "CANARY-args-5e6f12",
    "pattern": "CANARY-pattern-3a4b5c",
    "remembered": "CANARY-remembered-8d9e0f",
}
JFR_FRAMES = ("jfr_samples", "jfr_allocations", "jfr_old_objects", "jfr_heap", "jfr_locks")


def secret_events() -> list[dict[str, Any]]:
    """The events a default recording holds that carry secrets, with canary values."""
    return [
        {
            "type": "jdk.InitialEnvironmentVariable",
            "values": {"startTime": "2026-12-02T15:40:28Z", "key": "DB_PASSWORD",
                       "value": CANARIES["env"]},
        },
        {
            "type": "jdk.InitialSystemProperty",
            "values": {"startTime": "2026-12-02T15:40:28Z", "key": "javax.net.ssl.keyStorePassword",
                       "value": CANARIES["property"]},
        },
        {
            "type": "jdk.SystemProcess",
            "values": {"startTime": "2026-12-02T15:40:28Z", "pid": "4242",
                       "commandLine": f"psql postgresql://ops:{CANARIES['process']}@db/prod"},
        },
        {
            "type": "jdk.JVMInformation",
            "values": {"startTime": "2026-12-02T15:40:28Z", "jvmName": "OpenJDK",
                       "jvmArguments": f"-Dpassword={CANARIES['jvm_args']} -Xmx1g",
                       "javaArguments": "StalledAgent"},
        },
    ]  # fmt: skip


def hostile_export(tmp_path: Path) -> Path:
    """The real fixture's events, the secret-bearing ones among them, and thread names that
    hold a ``password=`` pattern and a credential the process remembers."""
    with gzip.open(DATA / "stalled-agent.json.gz", "rt", encoding="utf-8") as handle:
        events: list[dict[str, Any]] = json.load(handle)["recording"]["events"]
    for event in events:
        thread = event["values"].get("sampledThread") or {}
        if str(thread.get("javaName", "")).startswith("tool-pool-1-thread-1"):
            thread["javaName"] = f"tool-pool-1-thread-1 password={CANARIES['pattern']}"
        elif str(thread.get("javaName", "")).startswith("tool-pool-1-thread-2"):
            thread["javaName"] = f"tool-pool-1-thread-2 {CANARIES['remembered']}"
    path = tmp_path / "agent.json"
    document = {"recording": {"events": secret_events() + events + secret_events()}}
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def assert_no_canary(text: str, where: str, *, kernel: bool = False) -> None:
    """No canary in ``text``; in a flow's kernel (``kernel``), which resolved no URL of this
    process, the credential only this process remembers is not looked for."""
    for name, canary in CANARIES.items():
        if not (kernel and name == "remembered"):
            assert canary not in text, f"the {name} canary reached {where}"


def frames_text(incident: Evidence) -> str:
    parts = [incident.frame(name).to_csv() for name in JFR_FRAMES]
    return "\n".join([*parts, incident.rejects.to_csv(), incident.warnings.to_csv()])


@pytest.mark.slow
def test_no_secret_of_an_export_reaches_a_frame_or_a_flow_run(tmp_path: Path) -> None:
    remember_url(f"postgresql://ops:{CANARIES['remembered']}@db/prod")
    export = hostile_export(tmp_path)
    assert all(canary in export.read_text(encoding="utf-8") for canary in CANARIES.values())
    incident = Evidence(parse_manifest({"jfr": {"path": str(export)}}, base=tmp_path))
    assert len(incident.jfr_samples) > 0
    assert_no_canary(frames_text(incident), "a frame")
    names = set(incident.jfr_samples["thread"])
    assert "tool-pool-1-thread-1 password=***" in names and "tool-pool-1-thread-2 ***" in names
    as_of = incident.jfr_samples["ts"].max() + pd.Timedelta("1s")
    (tmp_path / "pack").mkdir()
    (tmp_path / "pack" / "evidence.toml").write_text(
        f'allow_outside = true\n[jfr]\npath = "{export}"\n', encoding="utf-8"
    )
    out = tmp_path / "out"
    for flow in ("latency_cliff", "overview"):
        code, findings, html = read_run(
            flow, tmp_path / "pack", out / flow, as_of=as_of.isoformat(), app_name="shipping"
        )
        assert code in (1, 2), (flow, code)
        assert findings["flow"] == flow
        shown = {"latency_cliff": "tool-pool-1-thread", "overview": "RunnerCache$Entry"}[flow]
        assert shown in html, f"the {flow} report does not show {shown}"
    written = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.suffix == ".ipynb" for p in written)
    for path in written:
        assert_no_canary(path.read_text("utf-8", errors="replace"), str(path), kernel=True)


RECORDS_SECRETS = """
public final class Leaky {
    public static void main(String[] args) throws Exception {
        Thread.sleep(1500);
    }
}
"""


@pytest.mark.slow
def test_a_real_recording_with_secrets_keeps_them_inside_the_jdk(tmp_path: Path) -> None:
    """A JVM recorded with the default settings (environment, system properties, JVM
    arguments and all) read through the real jfr: the canaries are in the recording, and in
    nothing the kit loads."""
    if shutil.which("java") is None or shutil.which("jfr") is None:
        pytest.skip("no JDK: java or jfr not on the PATH")
    source = tmp_path / "Leaky.java"
    source.write_text(RECORDS_SECRETS, encoding="utf-8")
    recording = tmp_path / "leaky.jfr"
    subprocess.run(
        [
            "java",
            f"-Dpassword={CANARIES['jvm_args']}",
            f"-Dservice.token={CANARIES['property']}",
            f"-XX:StartFlightRecording=filename={recording},settings=default,dumponexit=true",
            str(source),
        ],
        env={"PATH": "/usr/bin:/bin", "DB_PASSWORD": CANARIES["env"]},
        check=True,
        capture_output=True,
        timeout=120,
    )
    everything = subprocess.run(
        ["jfr", "print", "--json", str(recording)], capture_output=True, check=True, timeout=120
    ).stdout.decode("utf-8", "replace")
    for name in ("env", "property", "jvm_args"):
        assert CANARIES[name] in everything, f"the recording lacks the {name} canary"
    incident = Evidence(parse_manifest({"jfr": {"path": str(recording)}}, base=tmp_path))
    incident.load_all()
    assert_no_canary(frames_text(incident), "a frame")
