"""What a program sends is within the service's lengths as the service (C#) counts them, in
UTF-16 code units: a tag of 60 emoji (120 units) would be dropped by the service, a message of
1,500 emoji (3,000 units) cut, maybe in the middle of a surrogate pair."""

from __future__ import annotations

from pathlib import Path

from tests.support.faultserver import FaultServer
from tests.support.processes import run_program

PROGRAM = """
import logging
import eventlog_handler
eventlog_handler.setup()
log = logging.getLogger("emoji")
log.warning("😀" * 1500, extra={"tags": ["😀" * 60, "😀" * 50, "ok"]})
log.warning("a plain message", extra={"tags": ["plain"]})
"""


def units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def test_emoji_tags_and_messages_are_within_the_services_lengths(tmp_path: Path) -> None:
    with FaultServer() as server:
        status, stderr, _ = run_program(PROGRAM, server.url, tmp_path)
        assert status == 0, stderr
        assert server.wait_for(2), stderr
    by_tags = {tuple(event.get("tags", ())): event for event in server.accepted}
    emoji = by_tags[("😀" * 50, "ok")]  # the 120-unit tag is not sent: the service drops it
    message = emoji["message"]
    assert units(message) <= 2000 and message.endswith("chars]")
    assert message.startswith("😀" * 900)
    message.encode("utf-8")  # no half of a surrogate pair
    assert by_tags[("plain",)]["message"] == "a plain message"
