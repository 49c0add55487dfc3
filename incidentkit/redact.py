"""Keeping credentials out of messages, reports and findings.

A database URL can carry a password in two places: the userinfo (``user:secret@host``) and
the query string (``?password=secret``, ``sslpassword=...``). Every URL the kit shows passes
through :func:`redact_url`; free text (error messages, evidence rows) through
:func:`scrub_text`; :func:`url_secrets` lists what a post-run scan must never find.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote

MASK = "***"
SECRET_KEY = re.compile(r"pass(word|wd)?|secret|token|credential|api[_-]?key", re.IGNORECASE)
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@")
_QUERY_SECRET = re.compile(
    r"(?P<key>[?&;](?:[\w.-]*?)(?:pass(?:word|wd)?|secret|token|credential|api[_-]?key)"
    r"[\w.-]*=)(?P<value>[^&;\s'\"]+)",
    re.IGNORECASE,
)


def redact_url(url: str) -> str:
    """``url`` with the userinfo password and secret-named query values replaced by ***."""
    return scrub_text(url)


def scrub_text(text: str) -> str:
    """``text`` with every URL password (userinfo or query string) replaced by ***."""
    masked = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}{MASK}", masked)


def url_secrets(url: str) -> list[str]:
    """The parts of ``url`` that are credentials: the URL itself and each password in it."""
    found = [url]
    userinfo = _USERINFO.search(url)
    if userinfo:
        found += [userinfo["pw"], unquote(userinfo["pw"])]
    _, _, query = url.partition("?")
    found += [
        value for key, value in parse_qsl(query, keep_blank_values=False) if SECRET_KEY.search(key)
    ]
    return list(dict.fromkeys(secret for secret in found if len(secret) >= 4))


def has_query_secret(url: str) -> bool:
    """Whether ``url`` carries a secret-named query parameter (e.g. ``?password=``)."""
    return _QUERY_SECRET.search(url) is not None
