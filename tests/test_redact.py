from __future__ import annotations

import pytest

from incidentkit.redact import has_query_secret, redact_url, scrub_text, url_secrets


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


def test_url_secrets_lists_the_url_and_each_password_form() -> None:
    url = "postgresql://u:p%40ssw0rd@h/db?password=hunter22"
    assert url_secrets(url) == [url, "p%40ssw0rd", "p@ssw0rd", "hunter22"]
    assert url_secrets("sqlite:///x.db") == ["sqlite:///x.db"]


def test_query_secret_detection() -> None:
    assert has_query_secret("postgresql://u@h/db?password=x")
    assert not has_query_secret("postgresql://u@h/db?sslmode=require")
