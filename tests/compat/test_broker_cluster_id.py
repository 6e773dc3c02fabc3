"""The KRaft cluster ids the live-broker harness makes are ones Kafka's ``StorageTool format -t`` accepts."""

from __future__ import annotations

import base64
from typing import Iterator

from tests.support.live_broker import cluster_id

#: 16 bytes whose base64url text begins with "-" (the first six bits are 62): what one draw in 64 gives
DASH_FIRST = bytes([0xF8]) + bytes(15)
PLAIN = bytes(range(16))


def draws(*values: bytes) -> Iterator[bytes]:
    yield from values


def test_an_id_that_would_start_with_a_dash_is_drawn_again() -> None:
    assert base64.urlsafe_b64encode(DASH_FIRST).decode().startswith("-")
    source = draws(DASH_FIRST, DASH_FIRST, PLAIN)
    assert cluster_id(lambda: next(source)) == base64.urlsafe_b64encode(PLAIN).rstrip(b"=").decode()


def test_ids_are_22_characters_of_base64url() -> None:
    ids = {cluster_id() for _ in range(2_000)}
    assert len(ids) == 2_000
    assert all(len(i) == 22 and not i.startswith("-") and set(i) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") for i in ids)
