use super::*;

fn t(secs: i64) -> Timestamp {
    Timestamp::from_micros(secs * 1_000_000).unwrap()
}

/// Turns 0..=9 started at 0 s, 100 s, ..., 900 s.
fn conversation() -> Conversation {
    Conversation {
        turns: 10,
        turn_starts: (0..10).map(|i| t(i * 100)).collect(),
        compactions: vec![(0, 3, false), (2, 5, true)],
    }
}

#[test]
fn every_bound_form_parses() {
    assert_eq!(Bound::parse("5"), Ok(Bound::Turn(5)));
    assert_eq!(Bound::parse("-3"), Ok(Bound::BeforeLast(3)));
    assert_eq!(Bound::parse("last"), Ok(Bound::Last));
    assert_eq!(Bound::parse("90m"), Ok(Bound::Ago(90 * 60 * 1_000_000)));
    assert_eq!(Bound::parse("5h"), Ok(Bound::Ago(5 * 3600 * 1_000_000)));
    assert_eq!(Bound::parse("2d"), Ok(Bound::Ago(2 * 86_400 * 1_000_000)));
    for bad in [
        "",
        "x",
        "-",
        "5y",
        "h",
        "-5h",
        "1.5h",
        "99999999999999999999d",
    ] {
        assert!(Bound::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn integers_and_negative_integers_resolve() {
    let c = conversation();
    let now = t(1000);
    assert_eq!(
        c.range(Some(Bound::Turn(2)), Some(Bound::BeforeLast(3)), now),
        Ok((2, 6))
    );
    assert_eq!(c.range(None, None, now), Ok((0, 9)));
    // An end past the last turn is clamped to it.
    assert_eq!(c.range(None, Some(Bound::Turn(99)), now), Ok((0, 9)));
    assert!(c.range(None, Some(Bound::BeforeLast(10)), now).is_err());
}

#[test]
fn last_is_one_past_the_highest_compacted_turn() {
    let c = conversation();
    assert_eq!(c.range(Some(Bound::Last), None, t(1000)), Ok((6, 9)));
    let empty = Conversation {
        turns: 1,
        turn_starts: vec![t(0)],
        compactions: vec![],
    };
    assert_eq!(empty.range(Some(Bound::Last), None, t(0)), Ok((0, 0)));
}

#[test]
fn durations_pick_turns_by_start_time() {
    let c = conversation();
    let now = t(1000);
    // Started at most 250 s ago: turns starting at >= 750 s, the first is 8.
    assert_eq!(c.from_turn(Bound::Ago(250_000_000), now), Ok(8));
    // Started at least 250 s ago: turns starting at <= 750 s, the last is 7.
    assert_eq!(c.to_turn(Bound::Ago(250_000_000), now), Ok(7));
    assert!(c.from_turn(Bound::Ago(1), t(5000)).is_err());
}

#[test]
fn empty_and_inverted_ranges_are_errors() {
    let c = conversation();
    let now = t(1000);
    assert!(c
        .range(Some(Bound::Turn(7)), Some(Bound::Turn(3)), now)
        .is_err());
    assert!(c
        .range(Some(Bound::Turn(12)), Some(Bound::Turn(20)), now)
        .is_err());
    assert!(Conversation::default().range(None, None, now).is_err());
}

#[test]
fn summary_ranges_widen_until_stable() {
    // New 4..=6 meets 2..=5, which then meets 0..=2; 8..=9 stays apart.
    assert_eq!(
        widen_summary_range((4, 6), &[(2, 5), (0, 2), (8, 9)]),
        (0, 6)
    );
    // Containment widens too: new 3..=4 inside 1..=7.
    assert_eq!(widen_summary_range((3, 4), &[(1, 7)]), (1, 7));
    assert_eq!(widen_summary_range((3, 4), &[(5, 7)]), (3, 4));
}
