"""Locals (opt-in and masked), serious logs grouped by call site, in-app options, the
environment, and the version from a git checkout."""

from __future__ import annotations

import builtins
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eventlog_handler import EventLogHandler
from eventlog_handler.capture._exceptions import capture_exception
from eventlog_handler.delivery import _engine as transport
from eventlog_handler.settings import MASK, Settings
from eventlog_handler.wire import _frames
from tests.support.constants import API_KEY
from tests.support.processes import child_env, run_python

from .signature import server_signature


def fail_with_locals() -> None:
    password = "hunter2-very-secret"  # noqa: F841 - a local the event must not show
    header = "Bearer abcdefghijklmnop0123"  # noqa: F841
    dsn = "postgres://admin:s3cret@db.internal/shop"  # noqa: F841
    card = "4111 1111 1111 1111"  # noqa: F841
    count = 0
    print(1 / count)


def test_locals_only_with_include_locals(make_handler, server):
    logger, handler = make_handler()
    try:
        fail_with_locals()
    except ZeroDivisionError:
        logger.exception("failed")
    handler.engine.flush(5)
    (event,) = server.wait_for(1)
    frames = event["@simple_error"]["data"]["@frames"]
    assert all("vars" not in frame for frame in frames)


def test_locals_are_masked_by_name_and_by_value(make_handler, server):
    logger, handler = make_handler(include_locals=True)
    try:
        fail_with_locals()
    except ZeroDivisionError:
        logger.exception("failed")
    handler.engine.flush(5)
    (event,) = server.wait_for(1)
    frame = event["@simple_error"]["data"]["@frames"][-1]
    assert frame["function"] == "fail_with_locals" and frame["in_app"]
    variables = frame["vars"]
    assert variables["count"] == "0"
    assert variables["password"] == MASK
    assert variables["header"] == MASK
    assert variables["dsn"] == MASK
    assert variables["card"] == MASK
    text = str(variables)
    for secret in ("hunter2", "abcdefghijklmnop0123", "s3cret", "4111 1111"):
        assert secret not in text
    # the source lines are scrubbed like any text: a password assignment is masked there too
    assert "hunter2" not in str(frame["pre_context"])


def test_locals_bounded():
    frame = sys._getframe()
    big = "x" * 10_000  # noqa: F841
    nested = [[[[1]]]] * 100  # noqa: F841
    reprs = _frames.local_reprs(frame, ())
    assert all(len(text) <= _frames.MAX_VAR_REPR for text in reprs.values())
    assert "frame" not in reprs or len(reprs) <= _frames.MAX_VARS


def place_order(logger: logging.Logger, order: int) -> None:
    logger.error("order %s failed", order)


def cancel_order(logger: logging.Logger, order: int) -> None:
    logger.error("order %s failed", order)


def test_log_error_grouped_by_call_site_and_template(make_handler, server):
    logger, handler = make_handler()
    place_order(logger, 1)
    place_order(logger, 2)
    cancel_order(logger, 3)
    handler.engine.flush(5)
    first, second, third = server.wait_for(3)
    assert first["message"] == "order 1 failed" and second["message"] == "order 2 failed"
    assert server_signature(first) == server_signature(second)  # one call site, other args
    assert server_signature(first) != server_signature(third)  # another call site
    stack = first["data"]["@stack"]
    assert stack["signature_data"] == {
        "source": "app",
        "site": f"at {__name__}.place_order",
        "message": "order %s failed",
    }
    frames = first["data"]["@frames"]
    assert frames[-1]["function"] == "place_order" and frames[-1]["in_app"] is True
    assert all(frame["in_app"] for frame in frames)
    assert frames[-1]["context_line"].strip() == 'logger.error("order %s failed", order)'


def fail_order(logger: logging.Logger, order: object) -> None:
    logger.error(f"order {order} failed")


def test_log_error_with_a_message_formatted_before_the_call_is_one_stack(make_handler, server):
    """``log.error(f"order {id} failed")``: the template is the formatted text, and every id
    opened a stack of its own. Numbers, UUIDs and hex ids in it are one stack; other words
    are not."""
    logger, handler = make_handler()
    for order in (17, 42, "3f2a9c1e-1b2c-4d5e-8f90-123456789abc", "deadbeef0123", "lost"):
        fail_order(logger, order)
    handler.engine.flush(5)
    events = server.wait_for(5)
    assert [event["message"] for event in events][:2] == ["order 17 failed", "order 42 failed"]
    signatures = [server_signature(event) for event in events]
    assert len(set(signatures[:4])) == 1, [e["data"]["@stack"] for e in events]
    assert signatures[4] != signatures[0]
    assert events[0]["data"]["@stack"]["signature_data"]["message"] == "order # failed"
    assert events[0]["data"]["@stack"]["title"] == "order 17 failed (in " + (
        f"{__name__}.fail_order)"
    )


class Job:
    """An object with the default repr: ``<...Job object at 0x7f...>``, another address each."""


def test_addresses_and_hex_ids_joined_to_words_are_one_stack(make_handler, server):
    """An object's default repr, a hex id after ``_`` and an upper-case ``0x`` number in a
    message formatted before the call: another value is the same stack. Only their digits
    were left out, and each run of a program opened a stack of its own."""
    logger, handler = make_handler()
    values = (
        Job(),
        Job(),
        "req_9faf3ca1b2a4b",
        "req_a4c1b9b0e2",
        "0xA1DD2",
        "0xACDC7A",
        "lost_one",
    )
    for value in values:
        fail_order(logger, value)
    handler.engine.flush(5)
    events = server.wait_for(len(values))
    assert events[0]["message"] != events[1]["message"]  # two addresses
    signatures = [server_signature(event) for event in events]
    messages = [event["data"]["@stack"]["signature_data"]["message"] for event in events]
    assert messages[:6] == [
        f"order <{__name__}.Job object at #> failed",
        f"order <{__name__}.Job object at #> failed",
        "order req_# failed",
        "order req_# failed",
        "order # failed",
        "order # failed",
    ]
    assert signatures[0] == signatures[1]
    assert signatures[2] == signatures[3] != signatures[0]
    assert signatures[4] == signatures[5] != signatures[2]
    assert messages[6] == "order lost_one failed"


def test_a_0x_inside_a_word_is_not_an_address(make_handler, server):
    """``0x`` inside a word took the hex letters after it: ``box0xford`` became ``box#ord``.
    A word of letters and digits is an id, whole (``box0xford`` as ``7d9f8x2kq4``); a word of
    letters alone is kept."""
    logger, handler = make_handler()
    fail_order(logger, "box0xford")
    fail_order(logger, "boxoxford")
    handler.engine.flush(5)
    first, second = server.wait_for(2)
    assert first["data"]["@stack"]["signature_data"]["message"] == "order # failed"
    assert second["data"]["@stack"]["signature_data"]["message"] == "order boxoxford failed"


def test_in_app_rules_and_options(tmp_path):
    import json

    json_file = json.__file__
    assert not _frames.is_in_app(json_file, "json")
    assert not _frames.is_in_app("/srv/venv/lib/python3.12/site-packages/x/y.py", "x.y")
    assert not _frames.is_in_app("/usr/lib/python3/dist-packages/x/y.py", "x.y")
    assert not _frames.is_in_app(_frames.__file__, "eventlog_handler.wire._frames")
    assert _frames.is_in_app(str(tmp_path / "shop" / "cart.py"), "shop.cart")
    assert _frames.is_in_app(
        "/srv/venv/lib/python3.12/site-packages/acme/billing.py", "acme.billing", include=("acme",)
    )
    assert not _frames.is_in_app(
        str(tmp_path / "shop" / "vendor" / "x.py"), "shop.vendor.x", exclude=("shop.vendor",)
    )
    assert _frames.is_in_app(str(tmp_path / "shopping.py"), "shopping", exclude=("shop",))


@pytest.mark.parametrize("value", [["shop-app"], "shop..cart", [3], "1shop"])
def test_bad_in_app_options_are_a_clear_value_error(value):
    with pytest.raises(ValueError, match="in_app_include"):
        Settings.from_options({"in_app_include": value}, require_api_key=False)
    with pytest.raises(ValueError, match="in_app_exclude"):
        EventLogHandler(api_key=API_KEY, in_app_exclude=value)


def test_options_from_dictconfig_strings():
    settings = Settings.from_options(
        {"in_app_include": "acme, shop.core", "include_locals": "true", "environment": "staging"},
        require_api_key=False,
    )
    assert settings.in_app_include == ("acme", "shop.core")
    assert settings.include_locals is True
    assert settings.environment == "staging"
    assert (
        Settings.from_options(
            {}, environ={"EVENTLOG_ENVIRONMENT": "production"}, require_api_key=False
        ).environment
        == "production"
    )
    with pytest.raises(ValueError, match="environment"):
        Settings.from_options({"environment": "prod uction"}, require_api_key=False)


def test_environment_is_a_tag_and_a_data_key(make_handler, server):
    logger, handler = make_handler(environment="production", include_environment=True)
    logger.info("hello")
    try:
        print(1 / 0)
    except ZeroDivisionError:
        logger.exception("failed")
    handler.engine.flush(5)
    events = server.wait_for(2)
    (error_event,) = [event for event in events if event["type"] == "error"]
    for event in events:
        assert "production" in event["tags"]
        assert event["data"]["environment"] == "production", event
    assert "machine_name" in error_event["data"].get("@environment", {}), error_event


def test_the_environment_tag_stays_when_an_event_has_all_its_tags(make_handler, server):
    logger, handler = make_handler(environment="production")
    logger.warning("tagged", extra={"tags": [f"t{index}" for index in range(60)]})
    handler.engine.flush(5)
    (event,) = server.wait_for(1)
    assert len(event["tags"]) == 50  # the service's limit
    assert event["tags"][-1] == "production" and event["tags"][:49] == [
        f"t{index}" for index in range(49)
    ]


GIT_SCRIPT = """\
import logging
import eventlog_handler

eventlog_handler.setup(flush_interval=0.05, error_delay=0.01)
logging.getLogger("tool").warning("ran")
"""


def test_version_is_the_commit_of_a_git_checkout(server, tmp_path):
    repo = tmp_path / "tool"
    repo.mkdir()
    (repo / "tool.py").write_text(GIT_SCRIPT, encoding="utf-8")
    git = [
        "git",
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.com",
        "-c",
        "commit.gpgsign=false",
    ]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "add", "tool.py"], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "-m", "first"], check=True)
    sha = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    env = child_env(server.url)
    for name in (
        "EVENTLOG_VERSION",
        "SOURCE_VERSION",
        "GIT_COMMIT",
        "GITHUB_SHA",
        "CI_COMMIT_SHA",
        "HEROKU_SLUG_COMMIT",
    ):
        env.pop(name, None)
    result = subprocess.run(
        [sys.executable, str(repo / "tool.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    (event,) = server.wait_for(1)
    assert event["data"]["@version"] == sha
    # a deployment variable comes before git, EVENTLOG_VERSION before both
    env["GITHUB_SHA"] = "d" * 40
    subprocess.run(
        [sys.executable, str(repo / "tool.py")], cwd=tmp_path, env=env, check=True, timeout=60
    )
    env["EVENTLOG_VERSION"] = "2.0.1"
    subprocess.run(
        [sys.executable, str(repo / "tool.py")], cwd=tmp_path, env=env, check=True, timeout=60
    )
    events = server.wait_for(3)
    assert [event["data"]["@version"] for event in events] == [sha, "d" * 40, "2.0.1"]


def test_git_commit_reads_packed_refs_and_detached_heads(tmp_path):
    from eventlog_handler.wire._appversion import git_commit

    git_dir = tmp_path / "repo" / ".git"
    (git_dir / "refs" / "heads").mkdir(parents=True)
    sha = "a" * 40
    (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
    (git_dir / "packed-refs").write_text(f"# pack-refs with: peeled\n{sha} refs/heads/main\n")
    (tmp_path / "repo" / "src").mkdir()
    assert git_commit(str(tmp_path / "repo" / "src")) == sha
    (git_dir / "HEAD").write_text("b" * 40 + "\n")
    assert git_commit(str(tmp_path / "repo")) == "b" * 40
    assert git_commit(str(Path(os.sep))) is None


def test_resolved_frames_are_made_once_per_place_and_again_when_the_file_changes(tmp_path):
    import linecache

    (tmp_path / "shop").mkdir()
    source = tmp_path / "shop" / "cart.py"
    source.write_text("a = 1\nb = 2\nc = 3\n")
    filename = str(source)
    ref = (filename, 2, "f", None)
    first = _frames.resolve([ref])[0]
    second = _frames.resolve([ref])[0]
    assert second == first and second["context_line"] == "b = 2"
    assert second is not first and second["pre_context"] is not first["pre_context"]
    second["pre_context"].append("changed")  # an event's frame is its own
    assert _frames.resolve([ref])[0]["pre_context"] == ["a = 1"]

    source.write_text("a = 1\nb = 'edited'\nc = 3\n")
    os.utime(source, (1, 1))  # another mtime, whatever the clock's resolution
    linecache.checkcache(filename)  # what a traceback's formatting does
    assert _frames.resolve([ref])[0]["context_line"] == "b = 'edited'"

    shown = _frames.resolve([ref])[0]["filename"]
    sys.path.insert(0, str(tmp_path))
    try:
        assert _frames.resolve([ref])[0]["filename"] == "shop/cart.py" != shown
    finally:
        sys.path.remove(str(tmp_path))


def parse_expr(text: str) -> object:
    return parse_term(text)


def parse_term(text: str) -> object:
    return parse_factor(text)


def parse_factor(text: str) -> object:
    return parse_atom(text)


def parse_atom(text: str) -> object:
    if text.startswith("("):
        return parse_expr(text[1:])
    return {"x": 1}[text]  # the bug: only "x" is known


def test_a_recursion_through_several_functions_is_one_stack_at_any_depth(make_handler, server):
    """A recursive descent parser (expr > term > factor > atom > expr ...) failing in ``atom``:
    each depth of nesting in its input was a stack of its own (only runs of 1 to 3 frames
    were folded, and by line number: the frame that recurses is not the one that fails)."""
    logger, handler = make_handler()
    for text in ("y", "(y", "((y"):
        try:
            parse_expr(text)
        except KeyError:
            logger.exception("parse failed")
    handler.engine.flush(5)
    events = server.wait_for(3)
    signatures = {server_signature(event) for event in events}
    assert len(signatures) == 1, [event["data"]["@stack"] for event in events]
    frames = events[2]["data"]["@stack"]["signature_data"]["frames"]
    assert frames.endswith(
        " > ".join(f"{__name__}.parse_{rule}" for rule in ("expr", "term", "factor", "atom"))
    ), frames


def loop_a(n: int) -> int:
    return loop_b(n + 1)


def loop_b(n: int) -> int:
    return loop_c(n + 1)


def loop_c(n: int) -> int:
    return loop_d(n + 1)


def loop_d(n: int) -> int:
    return loop_a(n + 1)


def entered_at(depth: int, first: Any = None) -> int:
    if depth:
        return entered_at(depth - 1, first)
    return (first or loop_a)(0)


def twice_a(n: int) -> int:  # a cycle that names a function twice: a > a > b
    return twice_a(n + 1) if n % 3 == 0 else twice_b(n + 1)


def twice_b(n: int) -> int:
    return twice_a(n + 1)


def test_an_endless_recursion_is_one_stack_however_deep_it_began(make_handler, server):
    """A cycle of four functions that never ends: the recursion limit strikes in whichever of
    them the depth the program was at when it began makes it, so the innermost frames began
    and ended at another place in the cycle, and each depth was a stack of its own (also for
    a cycle that names a function twice, which the stack trace's folding cuts anywhere)."""
    logger, handler = make_handler()
    for depth in range(4):
        try:
            entered_at(depth)
        except RecursionError:
            logger.exception("endless")
    handler.engine.flush(5)
    events = server.wait_for(4)
    signatures = {server_signature(event) for event in events}
    assert len(signatures) == 1, [event["data"]["@stack"] for event in events]
    frames = events[0]["data"]["@stack"]["signature_data"]["frames"]
    assert frames == "in " + " > ".join(f"{__name__}.loop_{name}" for name in "abcd"), frames
    # A cycle that names a function twice: its repeated name was taken for a cycle of its own.
    for depth in range(6):
        try:
            entered_at(depth, twice_a)
        except RecursionError:
            logger.exception("endless twice")
    handler.engine.flush(5)
    twice = [e for e in server.wait_for(10) if e["message"] == "endless twice"]
    assert len(twice) == 6 and len({server_signature(e) for e in twice}) == 1, [
        e["data"]["@stack"] for e in twice
    ]


def reject_invoice(logger: logging.Logger, total: int) -> None:
    logger.error("invoice rejected", exc_info=ValueError(f"negative total {total}"))


def reject_address(logger: logging.Logger, code: str) -> None:
    logger.error("address rejected", exc_info=ValueError(f"bad zip {code}"))


def test_exceptions_never_raised_are_told_apart_by_where_they_were_logged(make_handler, server):
    """An exception logged without being raised (a validation result) has no frames: every
    such error of one type was one stack on the service, whatever the bug."""
    logger, handler = make_handler()
    reject_invoice(logger, -5)
    reject_invoice(logger, -7)
    reject_address(logger, "AB1")
    assert handler.engine.flush(5)
    events = server.wait_for(3)
    by_message = {}
    for event in events:
        by_message.setdefault(event["message"], []).append(server_signature(event))
    first, second = by_message["invoice rejected"]
    assert first == second
    assert by_message["address rejected"][0] != first
    stacks = {event["message"]: event["data"]["@stack"] for event in events}
    assert stacks["invoice rejected"]["signature_data"]["type"] == "ValueError"
    assert "reject_invoice" in stacks["invoice rejected"]["signature_data"]["site"]


def test_an_exception_captured_unraised_is_titled_by_its_type(server):
    """``capture_exception(ValueError("..."))`` of an exception raised nowhere: no message was
    logged with it, and its stack was titled "None (in ...)", with "None" in its signature."""
    settings = Settings.from_options({"api_key": API_KEY, "server_url": server.url})
    try:
        assert capture_exception(KeyError("sku-1"), settings=settings)
        assert transport.get_engine(settings).flush(5)
    finally:
        transport.get_engine(settings).shutdown(1)
    [event] = server.wait_for(1)
    stack = event["data"]["@stack"]
    assert stack["title"].startswith("KeyError (in tests.grouping.test_details."), stack
    assert "None" not in json.dumps(stack), stack


GROUP_CAUGHT_IN_PLACE = """
import logging, sys
import eventlog_handler

eventlog_handler.setup(flush_interval=0.05)
log = logging.getLogger("orders")


def charge():
    raise ValueError("card declined")


def ship():
    raise KeyError("no address")


def run(step):
    errors = []
    try:
        step()
    except Exception as exc:
        errors.append(exc)
    raise ExceptionGroup("batch failed", [*errors, OSError("disk")])


def process(name):
    try:
        try:
            run(charge if name == "charge" else ship)
        except* OSError:
            raise RuntimeError("cleanup failed")
    except Exception:
        log.exception("the order failed")


process(sys.argv[1])
"""


@pytest.mark.skipif(sys.version_info < (3, 11), reason="except* is Python 3.11's")
def test_a_group_reraised_by_except_star_is_told_by_its_members(server, tmp_path):
    """A group that ``except*`` re-raises and the same function catches has no traceback of
    its own: two groups failing for different reasons were one stack."""
    path = tmp_path / "orders.py"
    path.write_text(GROUP_CAUGHT_IN_PLACE)
    for name in ("charge", "ship", "charge"):
        result = run_python(server.url, [str(path), name], timeout=60)
        assert result.returncode == 0, result.stderr
    charge, ship, charge_again = sorted(server.wait_for(3), key=lambda e: e["date"])
    assert server_signature(charge) == server_signature(charge_again)
    assert server_signature(charge) != server_signature(ship)
    members = charge["data"]["@stack"]["signature_data"]["members"]
    assert "ValueError in __main__.charge" in members, members


def group_ship(order: int) -> None:
    raise KeyError(f"no address for {order}")


def group_charge(order: int) -> None:
    raise ValueError(f"card declined for {order}")


def failed_group(steps: str) -> BaseException:
    errors = []
    for order, step in enumerate(steps):
        try:
            (group_charge if step == "c" else group_ship)(order)
        except Exception as exc:
            errors.append(exc)
    return builtins.ExceptionGroup("batch failed", errors)  # type: ignore[attr-defined,no-any-return,unused-ignore]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="ExceptionGroup is Python 3.11's")
def test_a_large_group_is_one_stack_whatever_order_its_members_failed_in(make_handler, server):
    """Eleven failures, ten alike and one other: only the first ten members were listed, and
    the group's stack was told by them, so the same failures in another order (tasks finish in
    any) were another stack, and the one that differed was not seen."""
    logger, handler = make_handler()
    for steps in ("ssssssssssc", "cssssssssss"):
        try:
            raise failed_group(steps)
        except Exception:
            logger.exception("the batch failed")
    handler.engine.flush(5)
    first, second = server.wait_for(2)
    assert server_signature(first) == server_signature(second)
    members = first["data"]["@stack"]["signature_data"]["members"]
    assert f"ValueError in {__name__}.group_charge" in members, members
    assert f"KeyError in {__name__}.group_ship" in members, members
    listed = first["@simple_error"]["data"]["@ext"]
    assert len(listed["exceptions"]) == 10 and listed["exceptions_omitted"] == 1


IDS_PROGRAM = """
import logging, random, string, sys
import eventlog_handler

eventlog_handler.setup(flush_interval=0.05)
log = logging.getLogger("jobs")
pick = random.Random(int(sys.argv[1]))
base62 = string.ascii_letters + string.digits
crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
request = "".join(pick.choice(base62) for _ in range(11)) + pick.choice(string.digits)
ulid = "".join(pick.choice(crockford) for _ in range(25)) + pick.choice(string.digits)
pod = "web-" + "".join(pick.choice("bcdf2456789") for _ in range(9)) + "-x" + str(pick.randrange(1000, 9999))
log.error(f"request {request} on pod {pod} failed")
log.error(f"job {ulid} failed")
"""


def test_ids_of_letters_and_digits_in_a_formatted_message_are_one_stack(server, tmp_path):
    """ULIDs, base62 request ids and pod names in an f-string: only their digits were left out
    of the signature, and every process's error opened a stack of its own."""
    path = tmp_path / "jobs.py"
    path.write_text(IDS_PROGRAM)
    for seed in ("1", "2", "3"):
        result = run_python(server.url, [str(path), seed], timeout=60)
        assert result.returncode == 0, result.stderr
    events = server.wait_for(6)
    by_kind: dict[str, set[str]] = {}
    for event in events:
        by_kind.setdefault(event["message"].split()[0], set()).add(server_signature(event))
    assert len(by_kind["request"]) == 1, by_kind
    assert len(by_kind["job"]) == 1, by_kind
    assert len({event["message"] for event in events}) == 6  # the ids did differ


POOL_FAILURES = """
import concurrent.futures, logging, multiprocessing, sys
import eventlog_handler

eventlog_handler.setup(flush_interval=0.05)
log = logging.getLogger("batch")


def parse_invoice(number):
    raise ValueError(f"invoice {number}: bad date")


def resize_image(number):
    raise ValueError(f"image {number}: bad size")


def run(work):
    method = sys.argv[1]
    try:
        if method == "executor":
            with concurrent.futures.ProcessPoolExecutor(1) as pool:
                list(pool.map(work, range(2)))
        else:
            with multiprocessing.get_context(method).Pool(1) as pool:
                pool.map(work, range(2))
    except ValueError:
        log.exception("batch failed")


if __name__ == "__main__":
    run(parse_invoice)
    run(resize_image)
"""


def test_a_failure_in_a_pool_worker_is_stacked_by_the_workers_function(server, tmp_path):
    """A process pool raises the worker's exception again in the caller, with the worker's
    traceback as text only (its ``RemoteTraceback`` cause): two different functions failing
    in a pool were one stack, by the caller's frames ("ValueError in __main__.run")."""
    path = tmp_path / "batch.py"
    path.write_text(POOL_FAILURES)
    methods = ("fork", "spawn", "executor")
    for method in methods:
        result = run_python(server.url, [str(path), method], timeout=60)
        assert result.returncode == 0, result.stderr
    events = server.wait_for(2 * len(methods))
    stacks = {}
    for event in events:
        stacks.setdefault(event["data"]["@stack"]["title"], set()).add(server_signature(event))
    assert stacks.keys() == {
        "ValueError in __main__.parse_invoice",
        "ValueError in __main__.resize_image",
    }, stacks
    assert all(len(signatures) == 1 for signatures in stacks.values()), stacks  # each method


DEEP_POOL_FAILURE = """
import logging, multiprocessing, sys
import eventlog_handler

eventlog_handler.setup(flush_interval=0.05, in_app_exclude=sys.argv[2:])
log = logging.getLogger("batch")


def leaf_a():
    raise ValueError("a")


def leaf_b():
    raise ValueError("b")


def step_0(leaf):
    return (leaf_a if leaf == "a" else leaf_b)()


{steps}

def job(leaf):
    return step_29(leaf)


if __name__ == "__main__":
    with multiprocessing.get_context("fork").Pool(1) as pool:
        try:
            pool.map(job, [sys.argv[1]])
        except ValueError:
            log.exception("batch failed")
"""


def test_a_deep_failure_in_a_pool_worker_is_stacked_by_its_innermost_frames(server, tmp_path):
    """The worker's traceback, 30 frames deep, was cut to its first 2,000 characters: both
    failures were one stack, named after a frame in the middle of the recursion. And the
    worker's frames follow ``in_app_exclude`` as the others do."""
    path = tmp_path / "deep.py"
    steps = "\n\n".join(  # 30 functions: a traceback past 2,000 characters
        f"def step_{n}(leaf):\n    return step_{n - 1}(leaf)\n" for n in range(1, 30)
    )
    path.write_text(DEEP_POOL_FAILURE.replace("{steps}", steps))
    for arguments in (["a"], ["b"], ["a", "__main__"]):
        result = run_python(server.url, [str(path), *arguments], timeout=60)
        assert result.returncode == 0, result.stderr
    events = sorted(server.wait_for(3), key=lambda event: event["date"])
    titles = [event["data"]["@stack"]["title"] for event in events]
    assert titles[:2] == ["ValueError in __main__.leaf_a", "ValueError in __main__.leaf_b"], titles
    assert "__main__" not in titles[2], titles  # no application frame left: the innermost
