from __future__ import annotations

import html
import json
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from incidentkit import redact
from incidentkit.errors import SourceError
from incidentkit.findings import Provenance
from incidentkit.redact import (
    MASK,
    MIN_ENV_SECRET,
    SECRET_KEY,
    env_value_secrets,
    has_query_secret,
    redact_url,
    remember_env_value,
    remember_url,
    scrub_text,
    secret_forms,
    url_secrets,
)


@pytest.fixture(autouse=True)
def _fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no remembered secret: a value another test resolved from the
    environment (a whole URL such as ``postgresql://u@h/db``) would mask its expectations."""
    monkeypatch.setattr(redact, "_known", set())


# Passwords with every character a URL or a renderer treats specially.
HARD_PASSWORDS = [
    "S3cr3t xyz&123",
    "p@ss:w/rd#1",
    "100%sure&ok",
    "naïve-pässwörd",
    "quote'n\"back\\slash",
    "a+b=c;d?e",
]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://alice:s3cret@db/prod", "postgresql://alice:***@db/prod"),
        (
            "postgresql://u@h/db?password=hunter22&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
        (
            "postgresql://u@h/db?sslmode=require&sslpassword=k3y",
            "postgresql://u@h/db?sslmode=require&sslpassword=***",
        ),
        ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
    ],
)
def test_redact_url_hides_userinfo_and_query_passwords(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_scrub_text_finds_urls_inside_messages() -> None:
    text = "cannot connect: 'postgresql+psycopg://u:p%40ss@h:5432/db' (timeout)"
    assert scrub_text(text) == "cannot connect: 'postgresql+psycopg://u:***@h:5432/db' (timeout)"


def test_scrub_text_masks_dsn_keyword_and_query_forms_it_was_never_told() -> None:
    text = "dsn: host=db password=hunter22 user=u; url ?sslpassword=k3y&x=1 password = 'a b'"
    assert scrub_text(text) == (
        "dsn: host=db password=*** user=u; url ?sslpassword=***&x=1 password = ***"
    )


@pytest.mark.parametrize("password", HARD_PASSWORDS)
def test_every_rendering_of_a_remembered_password_is_masked(password: str) -> None:
    url = sa.URL.create(
        "postgresql+psycopg", username="fuzzer", password=password, host="127.0.0.1", port=1
    ).render_as_string(hide_password=False)
    remember_url(url)
    renderings = [
        password,
        quote(password, safe=""),
        quote(password, safe=" "),
        sa.make_url(url).render_as_string(hide_password=False),
        json.dumps(f"x {password} y"),
        json.dumps(f"x {password} y", ensure_ascii=False),
        html.escape(password),
        repr(password),
        f"host=h password={password}",
    ]
    for text in renderings:
        assert password not in scrub_text(text), text
        for form in secret_forms(password):
            assert form not in scrub_text(text), (text, form)
    # Errors mask them too, whatever their value holds.
    err = SourceError("cannot connect", value=f"{url} ({password})", fix="check it")
    assert password not in str(err) and quote(password, safe="") not in str(err)


@pytest.mark.parametrize("password", HARD_PASSWORDS)
def test_url_secrets_lists_the_raw_encoded_and_escaped_forms(password: str) -> None:
    url = f"postgresql://u:{quote(password, safe='')}@h/db?sslpassword=k3y-pass"
    found = url_secrets(url)
    assert password in found and quote(password, safe="") in found and "k3y-pass" in found
    assert html.escape(password) in found or html.escape(password) == password
    assert json.dumps(password)[1:-1] in found
    assert url not in found and "u" not in found


def test_url_secrets_of_a_url_without_a_password_is_empty() -> None:
    assert url_secrets("sqlite:///x.db") == []
    assert url_secrets("postgresql://alice@db.internal/prod") == []


def test_short_passwords_are_not_scanned_for() -> None:
    assert secret_forms("abc") == set()


def test_query_secret_detection() -> None:
    assert has_query_secret("postgresql://u@h/db?password=x")
    assert has_query_secret("postgresql://u@h/db?sslmode=require&PWD=x")
    assert not has_query_secret("postgresql://u@h/db?sslmode=require")


def test_a_count_of_tokens_is_not_a_secret_but_a_token_is() -> None:
    kept = Provenance(parameters={"price_per_1k_tokens": 0.002, "max_tokens": 8, "api_token": "x"})
    assert kept.parameters["price_per_1k_tokens"] == 0.002 and kept.parameters["max_tokens"] == 8
    assert kept.parameters["api_token"] == MASK
    assert SECRET_KEY.search("access_token") and SECRET_KEY.search("TOKEN")
    assert not SECRET_KEY.search("total_tokens")


ENV_VALUES = [
    "AKIA/sEcReT+key=9x",  # an AWS-style key: slashes, plus, equals
    "quote'n\"<tag>&amp; ü",
    "  padded-secret-value  ",
]


@pytest.mark.parametrize("value", ENV_VALUES)
def test_every_rendering_of_a_remembered_env_value_is_masked(value: str) -> None:
    remember_env_value(value)
    for text in (
        f"not a database URL: {value!r}",
        json.dumps({"message": value}),
        json.dumps({"message": value}, ensure_ascii=False),
        f"<pre>{html.escape(value)}</pre>",
        f"?x={quote(value, safe='')}",
        f"[{value.strip()}]",
    ):
        scrubbed = scrub_text(text)
        assert value.strip() not in scrubbed and MASK in scrubbed, text
        for form in env_value_secrets(value):
            assert form not in scrubbed, (text, form)


def test_env_value_secrets_hold_the_whole_value_and_a_urls_password() -> None:
    url = "postgresql://u:pw%26x@h/db?sslpassword=k3y-pass"
    found = env_value_secrets(url)
    assert url in found and quote(url, safe="") in found and json.dumps(url)[1:-1] in found
    assert "pw&x" in found and "pw%26x" in found and "k3y-pass" in found
    assert found == sorted(found, key=lambda form: (-len(form), form))


def test_short_env_values_are_not_scanned_for_but_url_passwords_are() -> None:
    assert env_value_secrets("x" * (MIN_ENV_SECRET - 1)) == []
    assert "x" * MIN_ENV_SECRET in env_value_secrets("x" * MIN_ENV_SECRET)
    short = "pg://u:s3cr@h/db"  # 16 characters: the URL whole and its 4-character password
    assert {short, "s3cr"} <= set(env_value_secrets(short))
    remember_env_value("postgres")  # 8 characters: masked from now on, as any value is
    assert scrub_text("user postgres") == f"user {MASK}"
