"""Time expressions in queries: what the grammar finds and the windows dateparser resolves them to."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engram.errors import InvalidInputError
from engram.store.timeq import asks_when, parse_time, reference_ms, states_time, text_time_ms, to_ms

#: Friday 20 October 2023, noon UTC: the question's own date in these cases.
REFERENCE = "2023-10-20T12:00:00Z"


def day(text: str) -> str:
    return f"{text}T00:00:00Z"


@pytest.mark.parametrize(
    ("query", "text", "start", "end", "is_range"),
    [
        ("What did Nate do for Joanna on 25 May, 2022?", "25 May, 2022", "2022-05-25", "2022-05-26", False),
        ("the talk on October 13, 2023", "October 13, 2023", "2023-10-13", "2023-10-14", False),
        ("book finished on 8th December, 2023", "8th December, 2023", "2023-12-08", "2023-12-09", False),
        ("the 2023-05-08 meeting", "2023-05-08", "2023-05-08", "2023-05-09", False),
        ("What did Maria donate in December 2023?", "in December 2023", "2023-12-01", "2024-01-01", False),
        ("When did Melanie go camping in June?", "in June", "2023-06-01", "2023-07-01", False),
        ("camping in November?", "in November", "2022-11-01", "2022-12-01", False),  # the latest November
        ("What did she do in 2022?", "in 2022", "2022-01-01", "2023-01-01", False),
        ("what happened yesterday", "yesterday", "2023-10-19", "2023-10-20", False),
        ("lunch last Tuesday", "last Tuesday", "2023-10-17", "2023-10-18", False),
        ("what did we discuss last week", "last week", "2023-10-09", "2023-10-16", False),
        ("the call two weeks ago", "two weeks ago", "2023-10-02", "2023-10-09", False),
        ("plans for next month", "next month", "2023-11-01", "2023-12-01", False),
        ("Which state did Joanna visit in summer 2021?", "summer 2021", "2021-06-01", "2021-09-01", False),
        ("trip last summer", "last summer", "2023-06-01", "2023-09-01", False),
        ("Where was Tim in the week before 16 November 2023?", "the week before 16 November 2023",
         "2023-11-09", "2023-11-16", False),
        ("camping two weekends before 17 July 2023", "two weekends before 17 July 2023", "2023-07-03", "2023-07-17",
         False),
        ("scuba on the Friday before 17 September, 2023", "the Friday before 17 September, 2023", "2023-09-10",
         "2023-09-17", False),
        ("a party two weeks after May 1, 2023", "two weeks after May 1, 2023", "2023-05-02", "2023-05-16", False),
        ("Where did Andrew go during the first weekend of August 2023?", "the first weekend of August 2023",
         "2023-08-01", "2023-08-08", False),
        ("the last week of August 2023", "the last week of August 2023", "2023-08-25", "2023-09-01", False),
        ("Was the first half of September 2022 good?", "the first half of September 2022", "2022-09-01",
         "2022-09-16", False),
        ("a win in the beginning of November 2022", "the beginning of November 2022", "2022-11-01", "2022-11-11",
         False),
        ("Where was John between August 11 and August 15 2023?", "between August 11 and August 15 2023",
         "2023-08-11", "2023-08-16", True),
        ("from March to June 2023", "from March to June 2023", "2023-03-01", "2023-07-01", True),
        ("gifts during December", "during December", "2022-12-01", "2023-01-01", False),
        ("skiing in the winter", "the winter", "2022-12-01", "2023-03-01", False),
        ("a doctor a few days before May 24, 2023", "a few days before May 24, 2023", "2023-05-21", "2023-05-24",
         False),
        ("the end of 2023", "the end of 2023", "2023-09-02", "2024-01-01", False),
        ("early May 2023", "early May 2023", "2023-05-01", "2023-05-11", False),
        ("plans this week", "this week", "2023-10-16", "2023-10-23", False),
    ],
)  # fmt: skip
def test_parse_time_resolves_expressions_to_windows(
    query: str, text: str, start: str, end: str, is_range: bool
) -> None:
    parsed = parse_time(query, REFERENCE)
    assert [w.as_dict() for w in parsed.windows] == [
        {"text": text, "start": day(start), "end": day(end), "range": is_range}
    ]


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("since March 2023", day("2023-03-01"), None),
        ("after June 2023", day("2023-07-01"), None),
        ("before 2023", None, day("2023-01-01")),
        ("until May 2023", None, day("2023-06-01")),
    ],
)
def test_open_ranges_are_ranges(query: str, start: str | None, end: str | None) -> None:
    (window,) = parse_time(query, REFERENCE).windows
    assert (window.as_dict()["start"], window.as_dict()["end"], window.range) == (start, end, True)


@pytest.mark.parametrize(
    "query",
    ["What may I do?", "What year did John start surfing?", "the 2048 token budget", "How did the march go",
     "last", "a summary of the meeting", ""],
)  # fmt: skip
def test_queries_without_a_time_expression_have_no_window(query: str) -> None:
    assert parse_time(query, REFERENCE).windows == ()


def test_two_expressions_give_two_windows_in_query_order() -> None:
    parsed = parse_time("What did Joanna finish last Friday on 23 January, 2022?", REFERENCE)
    assert [w.text for w in parsed.windows] == ["last Friday", "23 January, 2022"]
    assert parsed.ranges == ()


def test_relative_expressions_count_from_the_reference() -> None:
    earlier = parse_time("what happened yesterday", datetime(2022, 3, 1, 9, tzinfo=UTC))
    assert earlier.windows[0].as_dict()["start"] == day("2022-02-28")
    assert earlier.reference_ms == to_ms(datetime(2022, 3, 1, 9))
    now = to_ms(datetime(2024, 2, 10))
    assert parse_time("what happened yesterday", now_ms=now).windows[0].as_dict()["start"] == day("2024-02-09")


def test_reference_time_accepts_datetimes_strings_and_ms_and_refuses_the_rest() -> None:
    expected = to_ms(datetime(2023, 5, 8, 13, 56))
    assert reference_ms("1:56 pm on 8 May, 2023", 0) == expected
    assert reference_ms(datetime(2023, 5, 8, 13, 56, tzinfo=UTC), 0) == expected
    assert reference_ms(expected, 0) == expected
    assert reference_ms(None, 42) == 42
    with pytest.raises(InvalidInputError, match="not a date"):
        reference_ms("the day my cat was born", 0)
    with pytest.raises(InvalidInputError, match="reference_time"):
        reference_ms([2023], 0)  # type: ignore[arg-type]


def test_text_time_reads_iso_and_free_text_dates() -> None:
    assert text_time_ms("2023-05-08T10:00:00Z") == to_ms(datetime(2023, 5, 8, 10))
    assert text_time_ms("8 May, 2023") == to_ms(datetime(2023, 5, 8))
    assert text_time_ms("no date here") is None
    assert text_time_ms("") is None
    assert text_time_ms("x" * 500) is None  # long text is never handed to the parser


@pytest.mark.parametrize(
    "query",
    ["What do I do on Thursday nights?", "yoga on Tuesdays", "every Monday", "each other week", "gym on weekends",
     "Friday evenings with the band", "every summer"],
)  # fmt: skip
def test_habits_are_not_dates(query: str) -> None:
    assert parse_time(query, REFERENCE).windows == ()


def test_a_single_weekday_with_a_part_of_the_day_is_still_that_day() -> None:
    (window,) = parse_time("what did we eat on Friday night", REFERENCE).windows
    assert (window.text, window.as_dict()["start"]) == ("on Friday", day("2023-10-13"))


@pytest.mark.parametrize(
    ("query", "start", "end", "is_range"),
    [
        ("what changed after the spring", day("2023-06-01"), None, True),
        ("since the summer of 2022", day("2022-06-01"), None, True),
        ("before last winter", None, day("2022-12-01"), True),
        ("early summer 2023", day("2023-06-01"), day("2023-07-01"), False),
        ("two weeks after the summer", day("2023-09-01"), day("2023-09-15"), False),
    ],
)
def test_seasons_work_in_ranges_offsets_and_parts(
    query: str, start: str | None, end: str | None, is_range: bool
) -> None:
    (window,) = parse_time(query, REFERENCE).windows
    assert (window.as_dict()["start"], window.as_dict()["end"], window.range) == (start, end, is_range)


@pytest.mark.parametrize(
    "query",
    ["Where will I be living after the spring?", "What is she going to do in May?", "We'll meet next week",
     "Who shall host in June 2024?"],
)  # fmt: skip
def test_a_question_about_the_future_gives_no_window(query: str) -> None:
    assert parse_time(query, REFERENCE).windows == ()


@pytest.mark.parametrize(
    ("query", "asks"),
    [("When did Caroline go to the support group?", True), ("what year did John start surfing?", True),
     ("How long ago was the move?", True), ("In which month did she travel?", True),
     ("Whenever you like", False), ("Who went to the group?", False), ("Say when", False)],
)  # fmt: skip
def test_asks_when_knows_a_question_for_a_time(query: str, asks: bool) -> None:
    assert asks_when(query) is asks


@pytest.mark.parametrize(
    ("text", "states"),
    [("I went yesterday", True), ("Last week was fun", True), ("we met two weeks ago", True), ("back in July", True),
     ("since 2022", True), ("a couple of weeks ago", True), ("May I help?", False), ("I love hiking", False),
     ("back in the day", False)],
)  # fmt: skip
def test_states_time_finds_a_time_in_a_memory_s_words(text: str, states: bool) -> None:
    assert states_time(text) is states
