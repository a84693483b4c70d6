"""Settings: defaults, environment fallback, coercion of strings, validation, masking."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from eventlog_handler import settings
from eventlog_handler._values import is_loopback_url
from eventlog_handler.settings import OPTION_NAMES, Settings, mask_secret

from .conftest import TOKEN

ENV_KEY = "EnvKey0123456789abcdefghijklmnopqrstuvw"


def build(options=None, environ=None, **kwargs):
    return Settings.from_options(options, environ={} if environ is None else environ, **kwargs)


# -- defaults ---------------------------------------------------------------------------------


def test_defaults_with_only_a_key():
    s = build({"api_key": TOKEN})
    assert s.server_url == settings.DEFAULT_SERVER_URL == "http://127.0.0.1:5000"
    assert s.api_key == TOKEN
    assert s.timeout == 10.0
    assert s.verify is True
    assert s.queue_size == 10_000
    assert s.batch_size == 500
    assert s.max_batch_bytes == 200_000
    assert s.max_raw_batch_bytes == 2_000_000
    assert s.flush_interval == 3.0
    assert s.error_delay == 0.25
    assert s.shutdown_timeout == 2.0
    assert s.max_backoff == 300.0
    assert s.data_exclusions == settings.DEFAULT_DATA_EXCLUSIONS
    assert s.tags == ()
    assert s.include_environment is True


def test_default_exclusions_are_normalized_words():
    for word in settings.DEFAULT_DATA_EXCLUSIONS:
        assert word == settings.normalize_key(word)
    for word in ("password", "secret", "token", "apikey", "authorization", "cookie", "session"):
        assert word in settings.DEFAULT_DATA_EXCLUSIONS


def test_every_field_accepts_its_own_default_back():
    defaults = Settings()
    options = {
        name: getattr(defaults, name)
        for name in OPTION_NAMES
        if getattr(defaults, name) is not None
    }
    options["api_key"] = TOKEN
    s = build(options)
    for field in dataclasses.fields(Settings):
        if field.name != "api_key":
            assert getattr(s, field.name) == getattr(defaults, field.name), field.name


def test_engine_key_is_server_and_key():
    s = build({"api_key": TOKEN, "server_url": "https://collector.example/"})
    assert s.engine_key == ("https://collector.example", TOKEN)


# -- environment ------------------------------------------------------------------------------


def test_env_fallback_for_key_and_url():
    env = {settings.ENV_API_KEY: ENV_KEY, settings.ENV_SERVER_URL: "https://collector.example/"}
    assert settings.ENV_API_KEY == "EVENTLOG_API_KEY"
    assert settings.ENV_SERVER_URL == "EVENTLOG_SERVER_URL"
    s = build(environ=env)
    assert s.api_key == ENV_KEY
    assert s.server_url == "https://collector.example"


def test_explicit_beats_env():
    env = {"EVENTLOG_API_KEY": ENV_KEY, "EVENTLOG_SERVER_URL": "https://collector.example"}
    s = build({"api_key": TOKEN, "server_url": "http://127.0.0.1:6000"}, environ=env)
    assert s.api_key == TOKEN
    assert s.server_url == "http://127.0.0.1:6000"


def test_none_counts_as_absent_so_env_applies():
    s = build({"api_key": None, "server_url": None}, environ={"EVENTLOG_API_KEY": ENV_KEY})
    assert s.api_key == ENV_KEY
    assert s.server_url == settings.DEFAULT_SERVER_URL


def test_empty_env_values_are_ignored():
    s = build({"api_key": TOKEN}, environ={"EVENTLOG_API_KEY": "", "EVENTLOG_SERVER_URL": ""})
    assert s.server_url == settings.DEFAULT_SERVER_URL


def test_env_values_are_validated_too():
    with pytest.raises(ValueError, match="server_url"):
        build({"api_key": TOKEN}, environ={"EVENTLOG_SERVER_URL": "ftp://collector.example"})
    with pytest.raises(ValueError, match="api_key"):
        build(environ={"EVENTLOG_API_KEY": "short"})


def test_explicit_environ_does_not_read_os_environ(monkeypatch):
    monkeypatch.setenv("EVENTLOG_API_KEY", ENV_KEY)
    with pytest.raises(ValueError, match="api_key"):
        Settings.from_options({}, environ={})
    assert Settings.from_options({}).api_key == ENV_KEY  # environ=None reads os.environ


# -- strings from fileConfig ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("queue_size", "5", 5),
        ("queue_size", " 5 ", 5),
        ("batch_size", "20.0", 20),
        ("max_batch_bytes", "4096", 4096),
        ("timeout", "2.5", 2.5),
        ("flush_interval", "0.5", 0.5),
        ("error_delay", "0", 0.0),
        ("shutdown_timeout", "1", 1.0),
        ("max_backoff", "60", 60.0),
        ("include_environment", "true", True),
        ("include_environment", "True", True),
        ("include_environment", "yes", True),
        ("include_environment", "1", True),
        ("include_environment", "on", True),
        ("include_environment", "false", False),
        ("include_environment", "0", False),
        ("include_environment", "off", False),
        ("include_environment", "No", False),
        ("verify", "true", True),
        ("verify", "false", False),
        ("tags", "a,b", ("a", "b")),
        ("tags", " a , b ;c,, ", ("a", "b", "c")),
        ("data_exclusions", "a,b", ("a", "b")),
        ("data_exclusions", "SSN, Card-Number;x_y", ("ssn", "cardnumber", "xy")),
        ("server_url", " https://collector.example/base/ ", "https://collector.example/base"),
    ],
)
def test_strings_are_coerced(name, text, expected):
    s = build({"api_key": TOKEN, name: text})
    value = getattr(s, name)
    assert value == expected
    assert type(value) is type(expected)


def test_int_options_are_ints_and_float_options_floats():
    s = build({"api_key": TOKEN, "queue_size": 7.0, "timeout": 3})
    assert s.queue_size == 7 and type(s.queue_size) is int
    assert s.timeout == 3.0 and type(s.timeout) is float


def test_lists_are_accepted_for_tags_and_exclusions():
    s = build({"api_key": TOKEN, "tags": ["web", " api "], "data_exclusions": ["Pass-Phrase"]})
    assert s.tags == ("web", "api")
    assert s.data_exclusions == ("passphrase",)


def test_empty_exclusions_disable_masking():
    assert build({"api_key": TOKEN, "data_exclusions": []}).data_exclusions == ()
    assert build({"api_key": TOKEN, "data_exclusions": ""}).data_exclusions == ()


def test_verify_accepts_an_existing_ca_bundle(tmp_path):
    import certifi

    bundle = tmp_path / "ca.pem"  # a real one: a file no certificate can be read from is refused
    bundle.write_bytes(Path(certifi.where()).read_bytes())
    assert build({"api_key": TOKEN, "verify": str(bundle)}).verify == str(bundle)


def test_token_is_stripped():
    assert build({"api_key": f"  {TOKEN}\n"}).api_key == TOKEN


# -- malformed values -------------------------------------------------------------------------


MALFORMED = [
    ("server_url", ""),
    ("server_url", "   "),
    ("server_url", 5),
    ("server_url", "127.0.0.1:5000"),
    ("server_url", "ftp://collector.example"),
    ("server_url", "http://"),
    ("server_url", "http://collector.example:notaport"),
    ("server_url", "http://collector.example:99999"),
    ("server_url", "http://collector.example/?q=1"),
    ("server_url", "http://collector.example/#frag"),
    ("api_key", "short"),
    ("api_key", "has spaces in the middle of it"),
    ("api_key", "tab\tinside0123456789"),
    ("api_key", "nul\x00inside0123456789"),
    ("api_key", 1234567890123),
    ("api_key", ""),
    ("timeout", "abc"),
    ("timeout", "-1"),
    ("timeout", 0),
    ("timeout", "nan"),
    ("timeout", "inf"),
    ("timeout", True),
    ("timeout", [1]),
    ("queue_size", "0"),
    ("queue_size", "1.5"),
    ("queue_size", "many"),
    ("queue_size", -3),
    ("batch_size", 0),
    ("batch_size", "2.5"),
    ("max_batch_bytes", "100"),
    ("max_raw_batch_bytes", 10),
    ("flush_interval", 0),
    ("flush_interval", "soon"),
    ("error_delay", -0.5),
    ("shutdown_timeout", "-1"),
    ("max_backoff", 0),
    ("max_backoff", "forever"),
    ("verify", "/no/such/ca-bundle.pem"),
    ("verify", 2),
    ("verify", 1.5),
    ("include_environment", "maybe"),
    ("include_environment", 2),
    ("include_environment", ""),
    ("tags", 5),
    ("tags", [1, 2]),
    ("tags", ["x" * 101]),
    ("data_exclusions", 5),
    ("data_exclusions", ["ok", None]),
]


@pytest.mark.parametrize(("name", "value"), MALFORMED)
def test_malformed_value_is_a_value_error_naming_the_setting(name, value):
    options = {"api_key": TOKEN, name: value}
    with pytest.raises(ValueError) as info:
        build(options)
    assert name in str(info.value)


NUMERIC = [
    field.name
    for field in dataclasses.fields(Settings)
    if field.type in ("int", "float", int, float)
]


def test_numeric_options_are_known():
    assert {"timeout", "queue_size", "batch_size", "flush_interval", "max_backoff"} <= set(NUMERIC)


@pytest.mark.parametrize("value", ["ten", "-1", "nan", "-inf", True, object()])
@pytest.mark.parametrize("name", NUMERIC)
def test_every_numeric_option_rejects_garbage(name, value):
    with pytest.raises(ValueError) as info:
        build({"api_key": TOKEN, name: value})
    assert repr(name) in str(info.value)


def test_malformed_ipv6_url_names_the_setting():
    # urlsplit() raises its own ValueError ("Invalid IPv6 URL") for an unclosed bracket.
    with pytest.raises(ValueError) as info:
        build({"api_key": TOKEN, "server_url": "http://[::1:5000"})
    assert "server_url" in str(info.value)


def test_malformed_key_message_does_not_reveal_the_key():
    key = "abcdefghijkl mnopqrstuvwxyz"
    with pytest.raises(ValueError) as info:
        build({"api_key": key})
    assert "api_key" in str(info.value)
    assert key not in str(info.value)
    assert "mnopqrstuvwxyz" not in str(info.value)


def test_unknown_option_is_a_type_error_naming_it():
    with pytest.raises(TypeError) as info:
        build({"api_key": TOKEN, "sever_url": "http://127.0.0.1:5000", "colour": "red"})
    assert "sever_url" in str(info.value)
    assert "colour" in str(info.value)


def test_missing_api_key_is_a_value_error_naming_api_key():
    with pytest.raises(ValueError) as info:
        build({})
    assert "api_key" in str(info.value)
    assert "EVENTLOG_API_KEY" in str(info.value)


def test_api_key_optional_when_not_required():
    s = build({}, require_api_key=False)
    assert s.api_key is None
    assert s.engine_key == (settings.DEFAULT_SERVER_URL, "")


# -- masking ----------------------------------------------------------------------------------


def test_repr_masks_the_key():
    s = build({"api_key": TOKEN})
    for text in (repr(s), str(s), f"{s}", f"{s!r}"):
        assert TOKEN not in text
        assert TOKEN[8:] not in text
        assert mask_secret(TOKEN) in text
    assert "server_url='http://127.0.0.1:5000'" in repr(s)


def test_repr_without_key():
    assert "<none>" in repr(build({}, require_api_key=False))


@pytest.mark.parametrize(
    ("secret", "expected"),
    [
        (None, "<none>"),
        ("", "<none>"),
        ("abc", "****"),
        ("abcdefgh", "****"),
        ("abcdefghi", "abcd…"),
        (TOKEN, TOKEN[:4] + "…"),
    ],
)
def test_mask_secret(secret, expected):
    assert mask_secret(secret) == expected


def test_mask_secret_never_shows_more_than_four_characters():
    for length in range(1, 60):
        secret = "".join(chr(ord("a") + i % 26) for i in range(length))
        masked = mask_secret(secret)
        if length > 4:
            assert secret not in masked
        assert len(masked.rstrip("…*")) <= 4


# -- loopback ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:5000",
        "http://127.0.0.1",
        "https://127.0.0.1:8443/base",
        "http://127.1.2.3:80",
        "http://[::1]:5000",
        "http://[::1]",
        "http://localhost:5000",
        "http://LOCALHOST",
        "http://api.localhost:8080",
    ],
)
def test_loopback_urls(url):
    assert is_loopback_url(url) is True


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com",
        "https://collector.example.org:443",
        "http://10.0.0.5:5000",
        "http://192.168.1.1",
        "http://0.0.0.0:5000",
        "http://[2001:db8::1]:5000",
        "http://localhost.example.com",
        "http://127.0.0.1.example.com",
        "not a url",
        "",
    ],
)
def test_non_loopback_urls(url):
    assert is_loopback_url(url) is False


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://u:p4ss@host/@x", "https://u:[excluded]@host/@x"),  # "@" in the path
        ("https://u:p4ss@[::1]:80/p@q", "https://u:[excluded]@[::1]:80/p@q"),
        ("http://TOKEN12345678@h/x", "http://[excluded]@h/x"),
        (
            "http://ci:hunter2@127.0.0.1:5000/a?b=c",
            "http://ci:[excluded]@127.0.0.1:5000/a?b=[excluded]",
        ),
        ("http://h/x", "http://h/x"),
        # The service's paging is no secret ("?page=[excluded]&limit=[excluded]" puzzled).
        (
            "http://h/api/v2/projects?page=2&limit=100&api_key=k3y&filter=a",
            "http://h/api/v2/projects?page=2&limit=100&api_key=[excluded]&filter=[excluded]",
        ),
        # A heartbeat and a session's end are told apart; the id (maybe an identity) is not.
        (
            "http://h/api/v2/events/session/heartbeat?id=ann@example.com&close=true",
            "http://h/api/v2/events/session/heartbeat?id=[excluded]&close=true",
        ),
        # Not URLs to urlsplit (no scheme, or a mistyped one): masked all the same.
        ("ci:p4ss@127.0.0.1:5000", "ci:[excluded]@127.0.0.1:5000"),
        ("https//ci:p4ss@h:80/x", "https//ci:[excluded]@h:80/x"),
        ("http:/ci:p4ss@h", "http:/ci:[excluded]@h"),
        ("http:ci:p4ss@h", "http:[excluded]@h"),
        ("http://127.0.0.1:5000/a:b@c", "http://127.0.0.1:5000/a:b@c"),  # a path's ":" and "@"
    ],
)
def test_shown_url_masks_the_credentials_and_keeps_host_and_path(url: str, shown: str) -> None:
    from eventlog_handler.settings import shown_url

    assert shown_url(url) == shown


def test_what_settings_say_of_themselves_are_not_options(capsys):
    """``problem`` and ``ignored_environment`` are not options: the handler refuses them as
    unknown, and ``setup()`` names them as unknown and runs on."""
    import eventlog_handler

    assert "problem" not in OPTION_NAMES and "ignored_environment" not in OPTION_NAMES
    with pytest.raises(TypeError, match="unknown option"):
        build({"api_key": TOKEN, "problem": "none"})
    handle = eventlog_handler.setup(TOKEN, "http://127.0.0.1:9", problem="none")
    try:
        assert "unknown option(s): problem" in capsys.readouterr().err
        assert handle.handler.settings.problem is None
    finally:
        handle.close(0.1)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1 :5000", "http://ci:p4ss@127.0.0.1 :5000", "http://h/a b", "http://h\t/"],
)
def test_a_url_with_a_blank_is_refused_at_once(url: str) -> None:
    """A blank in the host or path was taken, and every send then failed ("cannot reach
    127.0.0.1 :5000", or a 404): it is named as malformed at setup, the password masked."""
    with pytest.raises(ValueError, match="must not contain blanks") as info:
        build({"api_key": TOKEN, "server_url": url})
    assert "p4ss" not in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "https://ci:kX9/q2Lm+Zt8@collector.example.org",
        "https://ci:kX9q2#Lm8Zt@collector.example.org/api",
        "https://ci:kX9q2?Lm8Zt@collector.example.org",
        "https://ci:kX9@q2/Lm8Zt@collector.example.org",
        "http://ci:kX9@q2/Lm8Zt@127.0.0.1:18083/",
        "http://ci:kX9@q2/Lm8Zt@collector:5000",  # a service's name and its port
        "https://ci:kX9@q2/Lm8Zt@collector.example.org/exceptionless",  # and a path
    ],
)
def test_a_password_with_a_slash_or_mark_unencoded_is_masked_and_named(url: str) -> None:
    """A generated password pasted without %-encoding: the URL parser ends the host at its
    ``/``, ``?`` or ``#``, so the password was printed whole (or up to the mark) under "bad
    port". With an ``@`` before that mark too, the parser found a host ``q2``: the URL was
    taken, the key sent there, and most of the password printed."""
    from eventlog_handler.settings import shown_url

    host = url.rpartition("@")[2]
    assert shown_url(url) == f"{url.partition('//')[0]}//ci:[excluded]@{host}"
    with pytest.raises(ValueError) as info:
        build({"api_key": TOKEN, "server_url": url})
    said = str(info.value)
    assert "%-encoded" in said and "kX9" not in said and "Zt8" not in said, said


def test_a_scheme_in_capitals_is_read_as_written_in_small_letters() -> None:
    """``HTTP://host``: accepted, but the plain-http warning looked for ``http://`` only."""
    settings = build({"api_key": TOKEN, "server_url": "HTTP://collector.example.org:8080/x"})
    assert settings.server_url == "http://collector.example.org:8080/x"


def test_a_key_with_a_character_outside_ascii_is_named_as_malformed() -> None:
    """A key pasted with typographic quotes passed the check, and every event was then
    dropped as ``rejected`` with nothing said: it can't travel in a header."""
    with pytest.raises(ValueError) as info:
        build({"api_key": f"\u201c{TOKEN}\u201d"})
    said = str(info.value)
    assert "'api_key'" in said and "'\u201c'" in said and TOKEN[6:] not in said, said


@pytest.mark.parametrize("quote", ['"', "'"])
def test_a_key_with_the_quotes_of_an_env_file_is_named_as_malformed(quote: str) -> None:
    """``EVENTLOG_API_KEY='"key"'`` (an env file's quotes kept by the tool that read it) was
    taken as the key: every post refused (401), the key blamed."""
    with pytest.raises(ValueError) as info:
        build({"api_key": f"{quote}{TOKEN}{quote}"})
    said = str(info.value)
    assert "'api_key'" in said and repr(quote) in said and TOKEN[6:] not in said, said


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:/api@v2", "http://127.0.0.1:5000/a:b@c", "http://[::1]:80/p@q"]
)
def test_a_path_with_an_at_sign_is_not_taken_for_a_password(url: str) -> None:
    """An empty port (``host:/...``) was read as a user with a password holding a ``/``."""
    settings = build({"api_key": TOKEN, "server_url": url})
    assert settings.server_url == url and settings.shown_url == url
