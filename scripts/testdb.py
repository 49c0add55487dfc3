"""Find or start the PostgreSQL the test suite needs; print shell ``export`` lines.

Order: ``INCIDENTKIT_TEST_DATABASE_URL`` if set; else a server on 127.0.0.1:5432 (user
postgres); else a throwaway cluster from the installed PostgreSQL binaries (run as the
``postgres`` user when this runs as root, since initdb refuses root); else exit 1 saying how to
install PostgreSQL. ``python scripts/testdb.py down DIR`` stops a throwaway cluster.

``python scripts/testdb.py redis-up`` does the same for the Redis the Redis session-store tests
read (``INCIDENTKIT_TEST_REDIS_URL``): that variable if set, else a throwaway ``redis-server``
from the ``PATH``, listening on a unix socket only (``--port 0``), no persistence, so that its
command counters are the tests' own; exit 2 (no ``export`` lines) when there is no
``redis-server``. ``python scripts/testdb.py redis-down DIR`` stops it. The tests start one per
module (the test command needs none).

Only ``export`` lines go to stdout (the caller runs ``eval "$(...)"``); every error goes to
stderr with its reason, and the exit status is 1.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
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


REDIS_ENV = "INCIDENTKIT_TEST_REDIS_URL"
REDIS_DIR_ENV = "INCIDENTKIT_TEST_REDIS_DIR"
NO_REDIS = 2
"""redis-up's exit status when no Redis can be had here (the tests skip, saying why)."""


def _redis_answers(socket_path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(1)
            sock.connect(str(socket_path))
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def redis_up() -> int:
    """Print the export lines for a Redis the tests may write into; NO_REDIS when none."""
    if os.environ.get(REDIS_ENV):
        print(f"export {REDIS_ENV}='{os.environ[REDIS_ENV]}'")
        return 0
    server = shutil.which("redis-server")
    if server is None:
        sys.stderr.write(
            f"scripts/testdb.py: no redis-server on the PATH and {REDIS_ENV} is not set; "
            "install Redis (Debian/Ubuntu: apt-get install redis-server; macOS: brew install "
            f"redis) or point {REDIS_ENV} at a server the tests may write into\n"
        )
        return NO_REDIS
    scratch = Path(tempfile.mkdtemp(prefix="incidentkit-redis-"))
    sock = scratch / "redis.sock"
    command = [server, "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700"]
    command += ["--save", "", "--appendonly", "no", "--dir", str(scratch)]
    command += ["--daemonize", "yes", "--pidfile", str(scratch / "redis.pid")]
    command += ["--logfile", str(scratch / "redis.log")]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    for _ in range(100):
        if done.returncode != 0 or _redis_answers(sock):
            break
        time.sleep(0.05)
    if done.returncode != 0 or not _redis_answers(sock):
        said = done.stderr.strip() or _tail(scratch / "redis.log")
        redis_down(str(scratch))
        sys.stderr.write(f"scripts/testdb.py: redis-server did not start:\n{said}\n")
        return 1
    print(f"export {REDIS_ENV}='unix://{sock}'")
    print(f"export {REDIS_DIR_ENV}='{scratch}'")
    return 0


def redis_down(folder: str) -> int:
    """Stop the throwaway redis-server whose files are in ``folder``, and remove them."""
    pidfile = Path(folder) / "redis.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        pid = 0
    if pid > 0:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.05)
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "down":
        sys.exit(down(sys.argv[2]))
    if len(sys.argv) == 2 and sys.argv[1] == "redis-up":
        sys.exit(redis_up())
    if len(sys.argv) == 3 and sys.argv[1] == "redis-down":
        sys.exit(redis_down(sys.argv[2]))
    sys.exit(up())
