"""The one bounded read (`_reading.read_up_to`) and the CLI's readers built on it."""

from __future__ import annotations

import errno
import io
import os
import sys
import threading
from pathlib import Path

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core import cli
from nanobot_core._reading import READ_CHUNK, read_at_most, read_up_to

_limits = st.integers(min_value=0, max_value=300)


@given(data=st.binary(max_size=400), limit=_limits, start=st.integers(0, 20))
def test_bytes_are_read_to_one_past_the_limit_and_no_further(
    data: bytes, limit: int, start: int
) -> None:
    """Any bytes, from where the source is: what follows it up to limit + 1, and nothing more."""
    source = io.BytesIO(data)
    source.seek(min(start, len(data)))
    rest = data[source.tell() :]
    read = read_up_to(source, limit)
    assert read == rest[: limit + 1]
    assert source.tell() == len(data) - len(rest) + len(read)


@given(text=st.text(max_size=400), limit=_limits)
def test_text_is_read_to_one_past_the_limit_in_characters(text: str, limit: int) -> None:
    """A text source is counted in characters, and comes back as text."""
    read = read_up_to(io.StringIO(text), limit)
    assert isinstance(read, str)
    assert read == text[: limit + 1]


def test_an_empty_source_gives_the_empty_value_of_its_type() -> None:
    """Nothing to read is b"" from a binary source and "" from a text one."""
    assert read_up_to(io.BytesIO(), 10) == b""
    assert read_up_to(io.StringIO(), 10) == ""


def test_a_pipe_giving_its_bytes_in_pieces_is_read_whole() -> None:
    """A pipe read unbuffered gives short reads; they are not taken for its end."""
    reader, writer = os.pipe()
    pieces = [b"a" * 1000, b"b" * 7, b"c" * 5000]

    def write() -> None:
        with os.fdopen(writer, "wb", buffering=0) as stream:
            for piece in pieces:
                stream.write(piece)

    thread = threading.Thread(target=write)
    thread.start()
    with os.fdopen(reader, "rb", buffering=0) as stream:
        read = read_up_to(stream, 10_000)
    thread.join()
    assert read == b"".join(pieces)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=50)
@given(data=st.binary(max_size=300), limit=_limits, known=st.integers(0, 300))
def test_a_file_known_smaller_than_it_is_is_read_on_to_the_limit(
    tmp_path: Path, data: bytes, limit: int, known: int
) -> None:
    """A file that grew after its size was taken is read past that size, up to limit + 1."""
    path = tmp_path / "grown"
    path.write_bytes(data)
    with path.open("rb") as handle:
        read = read_up_to(handle, limit, size=min(known, len(data)))
    assert read == data[: limit + 1]


def test_a_file_is_read_a_chunk_at_a_time_past_the_chunk_size(tmp_path: Path) -> None:
    """A file longer than one chunk comes back whole below the limit and cut one past it."""
    data = bytes(range(256)) * (READ_CHUNK // 128 + 3)
    path = tmp_path / "big"
    path.write_bytes(data)
    with path.open("rb") as handle:
        assert read_at_most(handle, len(data)) == (data, len(data))
    with path.open("rb") as handle:
        assert read_at_most(handle, READ_CHUNK + 5) == (data[: READ_CHUNK + 6], len(data))


def test_the_cli_stops_reading_an_input_one_byte_past_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`read_bounded` refuses an input over the limit having read one byte past it, no more."""
    monkeypatch.setattr(cli, "MAX_INPUT_BYTES", 1000)
    source = io.BytesIO(b"y\n" * 5000)
    with pytest.raises(OSError, match="more than 1000 bytes") as refused:
        cli.read_bounded(source)
    assert refused.value.errno == errno.EFBIG
    assert source.tell() == 1001
    assert cli.read_bounded(io.BytesIO(b"y" * 1000)) == b"y" * 1000


def test_the_cli_stops_reading_stdin_text_one_character_past_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`read_stdin_text` refuses a flood having read one character past the limit, no more."""
    monkeypatch.setattr(cli, "MAX_INPUT_BYTES", 1000)
    flood = io.StringIO("é\n" * 5000)  # 10,000 characters, 15,000 bytes in UTF-8
    monkeypatch.setattr(sys, "stdin", flood)
    with pytest.raises(click.BadParameter, match="stdin gave more than 1000 characters"):
        cli.read_stdin_text("ARGS")
    assert len(flood.read()) == 10_000 - 1001
