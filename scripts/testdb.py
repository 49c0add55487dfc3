"""Find or start the PostgreSQL the test suite needs; print shell ``export`` lines.

Order: ``INCIDENTKIT_TEST_DATABASE_URL`` if set; else a server on 127.0.0.1:5432 (user
postgres); else a throwaway cluster from the installed PostgreSQL binaries (run as the
``postgres`` user when this runs as root, since initdb refuses root); else exit 1 saying how to
install PostgreSQL. ``python scripts/testdb.py down DIR`` stops a throwaway cluster.

Only ``export`` lines go to stdout (the caller runs ``eval "$(...)"``); every error goes to
stderr with its reason, and the exit status is 1.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from incidentkit.redact import redact_url

ENV = "INCIDENTKIT_TEST_DATABASE_URL"
LOCAL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
PORT = 55432
OS_USER = "postgres"
"""The OS user initdb and pg_ctl run as when this script runs as root."""


class SetupError(Exception):
    """A reason the test database cannot be had; ``up`` writes it to stderr."""


def _reachable(url: str) -> bool:
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(url, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
        return True
    except Exception:  # noqa: BLE001 - any failure means the server is not usable
        return False


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, port)) == 0


def _bindir() -> Path | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    found = shutil.which("initdb")
    if found:
        candidates.insert(0, found)
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(str(Path(out.stdout.strip()) / "initdb"))
    for initdb in candidates:
        if Path(initdb).is_file():
            return Path(initdb).parent
    return None


def _as_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["su", OS_USER, "-s", "/bin/sh", "-c", " ".join(cmd)]


def _run(cmd: list[str], *, what: str) -> None:
    """Run ``cmd``; a failure raises SetupError with the command's own stderr as the reason."""
    try:
        done = subprocess.run(_as_user(cmd), check=False, capture_output=True, text=True)
    except OSError as err:
        raise SetupError(f"{what} could not run: {err}") from err
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip() or "(it printed nothing)")[-2000:]
        raise SetupError(f"{what} failed (exit {done.returncode}):\n{said}")


def _check_os_user() -> None:
    """As root, initdb must run as another user: OS_USER has to exist."""
    if os.geteuid() != 0:
        return
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        raise SetupError(
            f"running as root, and initdb refuses root, but there is no {OS_USER!r} OS user to "
            f"run it as. Create one (useradd --system {OS_USER}), run as a normal user, or set "
            f"{ENV} to a server where the user may create databases."
        ) from None


def up() -> int:
    """Print the export lines for a usable PostgreSQL; 1 (reason on stderr) when there is none."""
    try:
        for line in _find_or_start():
            print(line)
    except SetupError as failure:
        sys.stderr.write(f"scripts/testdb.py: {failure}\n")
        return 1
    return 0


def _find_or_start() -> list[str]:
    if os.environ.get(ENV):
        if not _reachable(os.environ[ENV]):
            raise SetupError(
                f"{ENV} is set but the server does not answer: "
                f"{redact_url(os.environ[ENV])}; start it, or unset {ENV} to "
                "use 127.0.0.1:5432 or a throwaway cluster"
            )
        return [f"export {ENV}='{os.environ[ENV]}'"]
    if _port_open("127.0.0.1", 5432) and _reachable(LOCAL):
        return [f"export {ENV}='{LOCAL}'"]
    bindir = _bindir()
    if bindir is None:
        raise SetupError(
            "No PostgreSQL found: INCIDENTKIT_TEST_DATABASE_URL is not set, nothing answers on "
            "127.0.0.1:5432 and no initdb is installed.\nInstall it (Debian/Ubuntu: "
            "apt-get install postgresql; macOS: brew install postgresql) or point "
            "INCIDENTKIT_TEST_DATABASE_URL at a server where the user may create databases."
        )
    _check_os_user()
    scratch = Path(tempfile.mkdtemp(prefix="incidentkit-pg-"))
    try:
        return _start_cluster(bindir, scratch)
    except SetupError:
        down(str(scratch / "data"))
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def _start_cluster(bindir: Path, scratch: Path) -> list[str]:
    data = scratch / "data"
    if os.geteuid() == 0:
        shutil.chown(scratch, OS_USER)
        scratch.chmod(0o755)
    _run(
        [
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        ],
        what="initdb",
    )
    options = (
        f"-k {scratch} -p {PORT} -c listen_addresses=127.0.0.1 -c fsync=off "
        "-c synchronous_commit=off -c full_page_writes=off"
    )
    log = scratch / "server.log"
    start = [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w"]
    try:
        _run([*start, "-o", f"'{options}'", "start"], what="pg_ctl start")
    except SetupError as failure:
        raise SetupError(f"{failure}\nserver log:\n{_tail(log)}") from None
    url = f"postgresql+psycopg://postgres@127.0.0.1:{PORT}/postgres"
    for _ in range(50):
        if _reachable(url):
            break
        time.sleep(0.1)
    else:
        raise SetupError(f"the throwaway PostgreSQL in {scratch} started but {url} does not answer")
    return [
        f"export {ENV}='{url}'",
        f"export INCIDENTKIT_TEST_PGDATA='{data}'",
        f"echo 'started a throwaway PostgreSQL in {scratch}' >&2",
    ]


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no server log)"


def down(data: str) -> int:
    bindir = _bindir()
    if bindir is None or not Path(data).is_dir():
        return 0
    subprocess.run(
        _as_user([str(bindir / "pg_ctl"), "-D", data, "-m", "fast", "stop"]),
        check=False,
        capture_output=True,
    )
    shutil.rmtree(Path(data).parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "down":
        sys.exit(down(sys.argv[2]))
    sys.exit(up())
