"""Keeping credentials out of messages, reports and findings.

A database URL can carry a password in the userinfo (``user:secret@host``), in the query string
(``?password=secret``, ``sslpassword=...``), and a driver may echo it in DSN keyword form
(``password=secret``). Drivers and SQLAlchemy print a password in several renderings: raw,
percent-encoded, partly decoded (SQLAlchemy writes a space raw but ``&`` as ``%26``); a notebook
stores it JSON-escaped and an HTML report HTML-escaped.

So redaction knows the secrets rather than guessing at their shape. A value the manifest names
with ``env:`` is a secret until proven otherwise, whatever it holds (a manifest may name
``env:DB_PASSWORD`` by mistake, or a received one ``AWS_SECRET_ACCESS_KEY``): every value the
kit reads from the environment is handed to :func:`remember_env_value`, and :func:`scrub_text`
replaces every rendering (:func:`secret_forms`) of the whole value and of a URL's credentials
before its pattern fallbacks, which mask the userinfo, ``?key=`` and ``key=`` forms of secrets
it was never told. URLs are redacted on the parsed URL (:func:`redact_url`).
:func:`env_value_secrets` lists what a post-run scan must never find. Every pattern here runs in
linear time on any text.

Short secrets would match ordinary text everywhere, so they are not scanned for: a URL's
password under :data:`MIN_SECRET` characters, a whole value under :data:`MIN_ENV_SECRET`.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote, quote_plus, unquote, urlsplit

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

MASK = "***"
MIN_SECRET = 4
"""Shorter passwords (and secret query values) of a URL are not scanned for: they would match
ordinary text everywhere; the userinfo and ``key=`` patterns still mask them in a URL."""
MIN_ENV_SECRET = 8
"""Shorter whole values of an ``env:`` variable are not scanned for (``postgres``, a port)."""
SECRET_KEY = re.compile(r"pass(?:word|wd)?|pwd|secret|token(?!s)|credential|api[_-]?key", re.I)
"""Names of secrets; ``tokens`` (plural: a count, as in ``price_per_1k_tokens``) is not one."""
# user:password@ right after "://": the lookbehind anchors every try, so the scan is linear.
_USERINFO = re.compile(r"(?<=://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@")
# key=value at a word start (query string or DSN keyword form); the key decides in _mask_pair.
_PAIR = re.compile(r"(?<![\w.-])(?P<key>[\w.-]+)(?P<eq>\s*=\s*)(?P<value>'[^']*'|[^\s&;'\"]+)")
_UNPARSABLE = (ArgumentError, ValueError, TypeError)
_known: set[str] = set()


def remember_url(url: str) -> None:
    """Remember the passwords in ``url`` so every later message in this process masks them."""
    _known.update(url_secrets(url))


def remember_env_value(value: str) -> None:
    """Remember a value read from the environment (:func:`env_value_secrets`) so every later
    message in this process masks it."""
    _known.update(env_value_secrets(value))


def env_value_secrets(value: str) -> list[str]:
    """Every rendering of a value read from the environment, longest first: the whole value
    (raw and stripped, :data:`MIN_ENV_SECRET` characters or more) and, when it is a URL, its
    password and secret query values (:func:`url_secrets`)."""
    forms = secret_forms(value, minimum=MIN_ENV_SECRET)
    forms |= secret_forms(value.strip(), minimum=MIN_ENV_SECRET)
    forms.update(url_secrets(value))
    return sorted(forms, key=lambda form: (-len(form), form))


def secret_forms(secret: str, *, minimum: int = MIN_SECRET) -> set[str]:
    """Every way ``secret`` may be printed: raw, encoded, and as JSON or HTML stores it; none
    when it is shorter than ``minimum``."""
    if len(secret) < minimum:
        return set()
    base = {
        secret,
        quote(secret, safe=""),
        quote(secret, safe=" "),
        quote(secret, safe=" &=+$,;!*'()~"),
        quote_plus(secret),
        _sqlalchemy_form(secret),
        repr(secret)[1:-1],
    }
    forms = set(base)
    for form in base:
        forms.add(html.escape(form, quote=True))
        forms.add(html.escape(form, quote=False))
        for ascii_only in (True, False):
            as_json = json.dumps(form, ensure_ascii=ascii_only)[1:-1]
            forms.update((as_json, html.escape(as_json, quote=True)))
    return {form for form in forms if len(form) >= minimum}


def _sqlalchemy_form(secret: str) -> str:
    """The password as SQLAlchemy renders it in a URL (a space raw, ``&`` and ``@`` encoded)."""
    rendered = URL.create("x", username="u", password=secret, host="h")
    text = rendered.render_as_string(hide_password=False)
    return text[len("x://u:") : text.rindex("@")]


def url_secrets(url: str) -> list[str]:
    """Every rendering of each credential in ``url``: its password and secret query values."""
    secrets: list[str] = []
    try:
        parsed = make_url(url)
        if parsed.password:
            secrets.append(str(parsed.password))
        secrets += [value for key, value in _query_items(parsed.query) if SECRET_KEY.search(key)]
    except _UNPARSABLE:
        pass  # the plain splitting below still finds what it can
    try:
        split = urlsplit(url)
        netloc = split.netloc
    except ValueError:
        split, netloc = None, ""
    if "@" in netloc:
        userinfo = netloc.rpartition("@")[0]
        if ":" in userinfo:
            raw = userinfo.partition(":")[2]
            secrets += [raw, unquote(raw)]
    if split is not None:
        for pair in split.query.split("&"):
            key, _, value = pair.partition("=")
            if value and SECRET_KEY.search(key):
                secrets += [value, unquote(value), unquote(value.replace("+", " "))]
    forms: set[str] = set()
    for secret in secrets:
        forms |= secret_forms(secret)
    return sorted(forms, key=lambda form: (-len(form), form))


def _query_items(query: Mapping[str, str | tuple[str, ...]]) -> Iterable[tuple[str, str]]:
    for key, value in query.items():
        for one in [value] if isinstance(value, str) else value:
            yield key, one


def redact_url(url: str) -> str:
    """``url`` with its password and secret-named query values replaced by ***."""
    try:
        parsed = make_url(url)
        query = {
            key: (MASK if SECRET_KEY.search(key) else value) for key, value in parsed.query.items()
        }
        shown = parsed.set(query=query).render_as_string(hide_password=True)
    except _UNPARSABLE:  # not a URL SQLAlchemy reads: mask what the patterns find
        return scrub_text(url)
    return scrub_text(shown.replace(quote(MASK, safe=""), MASK))


def scrub_text(text: str) -> str:
    """``text`` with every known secret, and every URL or keyword password, replaced by ***."""
    for form in sorted(_known, key=len, reverse=True):
        if form in text:
            text = text.replace(form, MASK)
    text = _USERINFO.sub(lambda m: f"{m['user']}:{MASK}@", text)
    return _PAIR.sub(_mask_pair, text)


def _mask_pair(match: re.Match[str]) -> str:
    if not SECRET_KEY.search(match["key"]) or match["value"] == MASK:
        return match[0]
    return f"{match['key']}{match['eq']}{MASK}"


def has_query_secret(url: str) -> bool:
    """Whether ``url`` carries a secret-named query parameter (e.g. ``?password=``)."""
    _, _, query = url.partition("?")
    keys = (pair.partition("=")[0] for pair in query.split("&") if "=" in pair)
    return any(SECRET_KEY.search(key) for key in keys)
