"""PublishedMarker: outbox marks gathered over an interval, written together, flushed on stop."""

from __future__ import annotations

import asyncio

import pytest

from workflow.service.publishing import PublishedMarker


class Marks:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    async def __call__(self, ids: list[str]) -> None:
        self.calls.append(ids)
        if self.fail:
            raise RuntimeError("database is locked")


async def test_marks_of_several_batches_are_one_write() -> None:
    marks = Marks()
    marker = PublishedMarker(marks, interval=0.05)
    marker.add(["a", "b"])
    marker.add(["c"])
    assert marks.calls == []  # nothing written on the stage's path
    await asyncio.sleep(0.15)
    assert marks.calls == [["a", "b", "c"]]
    marker.add(["d"])
    await asyncio.sleep(0.15)
    assert marks.calls == [["a", "b", "c"], ["d"]]


async def test_flush_writes_what_is_gathered_at_once() -> None:
    marks = Marks()
    marker = PublishedMarker(marks, interval=3600)
    marker.add(["a"])
    await asyncio.wait_for(marker.flush(), 1.0)
    assert marks.calls == [["a"]]


async def test_a_failed_write_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    marks = Marks(fail=True)
    marker = PublishedMarker(marks, interval=0.01)
    marker.add(["a"])
    await asyncio.sleep(0.1)
    await marker.flush()
    assert marks.calls == [["a"]]
    assert "marking 1 outbox events published failed" in caplog.text
