"""Find or start the PostgreSQL the test suite needs; print shell ``export`` lines.

Order: ``INCIDENTKIT_TEST_DATABASE_URL`` if set; else a server on 127.0.0.1:5432 (user
postgres); else a throwaway cluster from the installed PostgreSQL binaries (run as the
``postgres`` user when this runs as root, since initdb refuses root); else exit 1 saying how to
install PostgreSQL. ``python scripts/testdb.py down DIR`` stops a throwaway cluster.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = "INCIDENTKIT_TEST_DATABASE_URL"
LOCAL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
PORT = 55432


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
    return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(cmd)]


def up() -> int:
    if os.environ.get(ENV):
        if not _reachable(os.environ[ENV]):
            print(f"echo '{ENV} is set but the server does not answer' >&2; exit 1")
            return 1
        print(f"export {ENV}='{os.environ[ENV]}'")
        return 0
    if _port_open("127.0.0.1", 5432) and _reachable(LOCAL):
        print(f"export {ENV}='{LOCAL}'")
        return 0
    bindir = _bindir()
    if bindir is None:
        sys.stderr.write(
            "No PostgreSQL found: INCIDENTKIT_TEST_DATABASE_URL is not set, nothing answers on "
            "127.0.0.1:5432 and no initdb is installed.\nInstall it (Debian/Ubuntu: "
            "apt-get install postgresql; macOS: brew install postgresql) or point "
            "INCIDENTKIT_TEST_DATABASE_URL at a server where the user may create databases.\n"
        )
        return 1
    scratch = Path(tempfile.mkdtemp(prefix="incidentkit-pg-"))
    data = scratch / "data"
    if os.geteuid() == 0:
        shutil.chown(scratch, "postgres")
        scratch.chmod(0o755)
    subprocess.run(
        _as_user(
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
            ]
        ),
        check=True,
        capture_output=True,
    )
    options = (
        f"-k {scratch} -p {PORT} -c listen_addresses=127.0.0.1 -c fsync=off "
        "-c synchronous_commit=off -c full_page_writes=off"
    )
    subprocess.run(
        _as_user(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(scratch / "server.log"),
                "-w",
                "-o",
                f"'{options}'",
                "start",
            ]
        ),
        check=True,
        capture_output=True,
    )
    url = f"postgresql+psycopg://postgres@127.0.0.1:{PORT}/postgres"
    for _ in range(50):
        if _reachable(url):
            break
        time.sleep(0.1)
    print(f"export {ENV}='{url}'")
    print(f"export INCIDENTKIT_TEST_PGDATA='{data}'")
    print(f"echo 'started a throwaway PostgreSQL in {scratch}' >&2")
    return 0


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
