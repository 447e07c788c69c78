"""Outcomes and their WIT form."""
from datetime import timedelta

import pytest
from wit_world.imports import types

import sluice
from sluice._outcome import to_wit


def test_each_outcome_has_its_wit_form() -> None:
    assert to_wit(sluice.done()) == types.Outcome_Done()
    assert to_wit(sluice.retry()) == types.Outcome_Retry(None)
    assert to_wit(sluice.retry(after=timedelta(seconds=1))) == types.Outcome_Retry(1000)
    assert to_wit(sluice.reject("why")) == types.Outcome_Reject("why")
    assert to_wit(sluice.snooze(timedelta(minutes=2))) == types.Outcome_Snooze(120_000)


def test_delays_round_up_to_whole_milliseconds() -> None:
    assert to_wit(sluice.retry(after=timedelta(microseconds=1500))) == types.Outcome_Retry(2)
    assert to_wit(sluice.snooze(timedelta(microseconds=1))) == types.Outcome_Snooze(1)
    assert to_wit(sluice.retry(after=timedelta(0))) == types.Outcome_Retry(0)


def test_a_negative_delay_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        sluice.retry(after=timedelta(seconds=-1))
    with pytest.raises(ValueError, match="must not be negative"):
        sluice.snooze(timedelta(milliseconds=-5))


def test_a_delay_in_plain_numbers_is_refused_with_a_hint() -> None:
    with pytest.raises(TypeError, match=r"timedelta\(milliseconds=...\)"):
        sluice.retry(after=10)  # type: ignore[arg-type]


def test_only_outcomes_convert() -> None:
    with pytest.raises(TypeError, match="must return a sluice.Outcome"):
        to_wit(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        to_wit(types.Outcome_Done())  # type: ignore[arg-type]


def test_outcomes_compare_by_value() -> None:
    assert sluice.retry(after=timedelta(seconds=1)) == sluice.Retry(timedelta(milliseconds=1000))
    assert sluice.reject("a") != sluice.reject("b")
    assert isinstance(sluice.done(), sluice.Done)
