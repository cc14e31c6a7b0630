use proptest::prelude::*;

use super::*;

fn sorted(mut v: Vec<usize>) -> Vec<usize> {
    v.sort_unstable();
    v
}

proptest! {
    /// Stabbing and window queries answer like a scan of every range.
    #[test]
    fn queries_match_a_scan(
        ranges in prop::collection::vec((0u64..60, 0u64..60), 0..80),
        turn in 0u64..70,
        window in (0u64..70, 0u64..70),
    ) {
        let index = OverlayIndex::new(&ranges);
        let covering: Vec<usize> = ranges
            .iter()
            .enumerate()
            .filter(|(_, &(a, b))| a <= b && a <= turn && turn <= b)
            .map(|(i, _)| i)
            .collect();
        prop_assert_eq!(sorted(index.covering(turn)), covering);
        let (lo, hi) = window;
        let meeting: Vec<usize> = ranges
            .iter()
            .enumerate()
            .filter(|(_, &(a, b))| a <= b && lo <= hi && a <= hi && lo <= b)
            .map(|(i, _)| i)
            .collect();
        prop_assert_eq!(sorted(index.meeting(lo, hi)), meeting);
    }
}

#[test]
fn ranges_past_any_turn_are_found() {
    let index = OverlayIndex::new(&[(0, u64::MAX), (5, 5), (3, 9)]);
    assert_eq!(sorted(index.covering(5)), [0, 1, 2]);
    assert_eq!(sorted(index.covering(1_000_000)), [0]);
    assert_eq!(sorted(index.meeting(6, 7)), [0, 2]);
    assert_eq!(index.len(), 3);
}
