"""Which message carrying an already recorded proposal is the one it was recorded from (and
has the proposal's events sent again): `workflow.service.intake.recorded_from`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from workflow.effects import StoredIntake
from workflow.service.intake import recorded_from
from workflow.service.publishing import CLOCK_SLACK

RECORDED = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def row(stream_seq: int | None) -> StoredIntake:
    return StoredIntake(
        id="p1", payload="{}", classification="{}", verdict="{}", trace=None,
        received_at=RECORDED, stream_seq=stream_seq,
    )  # fmt: skip


moments = st.one_of(
    st.none(),
    st.timedeltas(min_value=-timedelta(days=30), max_value=timedelta(days=30)).map(
        lambda d: RECORDED + d
    ),
)


@given(
    kept=st.integers(1, 2**63 - 1),
    seq=st.integers(1, 2**63 - 1),
    delivery=st.integers(1, 10),
    stored_at=moments,
)
def test_a_kept_sequence_decides_alone(
    kept: int, seq: int, delivery: int, stored_at: datetime | None
) -> None:
    # Neither the delivery count (a killed server can hand a message out again as its first
    # delivery) nor the clocks weigh against the sequence the row keeps.
    assert recorded_from(row(kept), seq, delivery, stored_at) is (seq == kept)
    assert recorded_from(row(kept), kept, delivery, stored_at)


def test_without_a_kept_sequence_the_times_and_the_delivery_count_decide() -> None:
    old = row(None)
    before = RECORDED - timedelta(milliseconds=3)
    long_after = RECORDED + CLOCK_SLACK + timedelta(seconds=1)
    assert recorded_from(old, 10, 1, before)  # stored before it was recorded
    assert recorded_from(old, 10, 1, RECORDED + CLOCK_SLACK / 2)  # within the clocks' slack
    assert recorded_from(old, 10, 2, long_after)  # delivered before
    assert recorded_from(old, 10, 1, None)  # cannot tell: sent again (JetStream drops it)
    assert not recorded_from(old, 10, 1, long_after)  # a copy published later
    # A message without a sequence (not from the stream) is judged the same way.
    assert recorded_from(row(10), None, 1, before)
    assert not recorded_from(row(10), None, 1, long_after)
