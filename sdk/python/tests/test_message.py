"""sluice.Message: what a handler reads of a delivery."""
from datetime import datetime, timezone

import pytest
from wit_world.imports import types

import sluice


def wit_message(payload: bytes) -> types.Message:
    return types.Message(
        id="m-1",
        key="k-1",
        queue="orders",
        payload=payload,
        headers=[("a", "1"), ("b", "2"), ("a", "3")],
        attempt=3,
        enqueued_at_ms=1_700_000_000_123,
    )


def test_from_wit_keeps_every_field() -> None:
    msg = sluice.Message._from_wit(wit_message(b"hi"))
    assert (msg.id, msg.key, msg.queue, msg.attempt) == ("m-1", "k-1", "orders", 3)
    assert msg.payload == b"hi" and type(msg.payload) is bytes
    assert msg.headers == [("a", "1"), ("b", "2"), ("a", "3")]
    assert msg.enqueued_at == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=timezone.utc)


def test_header_is_the_first_of_that_name() -> None:
    msg = sluice.Message._from_wit(wit_message(b""))
    assert msg.header("a") == "1"
    assert msg.header("b") == "2"
    assert msg.header("A") is None


def test_text_decodes_utf8_or_raises() -> None:
    assert sluice.Message(id="m", payload="grüß".encode()).text() == "grüß"
    with pytest.raises(UnicodeDecodeError):
        sluice.Message(id="m", payload=b"\xff").text()


def test_json_parses_utf8_json() -> None:
    msg = sluice.Message(id="m", payload='{"id": 7, "name": "ä", "x": [1.5, null]}'.encode())
    assert msg.json() == {"id": 7, "name": "ä", "x": [1.5, None]}


def test_json_does_not_guess_other_encodings() -> None:
    # json.loads(bytes) would detect UTF-16; a sluice payload is UTF-8 only.
    with pytest.raises(UnicodeDecodeError):
        sluice.Message(id="m", payload='{"a": 1}'.encode("utf-16")).json()


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}', "1e400", "[-1e999]"])
def test_json_refuses_what_strict_json_does(text: str) -> None:
    with pytest.raises(ValueError):
        sluice.Message(id="m", payload=text.encode()).json()


def test_json_refuses_128_levels_of_nesting_but_not_127() -> None:
    assert sluice.Message(id="m", payload=b"[" * 127 + b"]" * 127).json() is not None
    with pytest.raises(ValueError, match="recursion limit exceeded"):
        sluice.Message(id="m", payload=b"[" * 128 + b"]" * 128).json()
    with pytest.raises(ValueError, match="recursion limit exceeded"):
        sluice.Message(id="m", payload=b'{"a":' * 200).json()


def test_json_counts_no_brackets_inside_strings() -> None:
    text = '["' + "[" * 300 + '\\"{"]'
    assert sluice.Message(id="m", payload=text.encode()).json() == ["[" * 300 + '"{']


def test_json_reports_the_parser_message() -> None:
    with pytest.raises(ValueError, match="Expecting value: line 1 column 1"):
        sluice.Message(id="m", payload=b"not json").json()
