//! The lanes give exactly `blake3::hash` of each input.

use convstore_lanes::{hash_many, one_by_one, CHUNK_LEN};
use proptest::prelude::*;

fn both(inputs: &[&[u8]]) -> (Vec<[u8; 32]>, Vec<[u8; 32]>) {
    let mut lanes = vec![[0u8; 32]; inputs.len()];
    let mut reference = vec![[0u8; 32]; inputs.len()];
    hash_many(inputs, &mut lanes);
    one_by_one(inputs, &mut reference);
    (lanes, reference)
}

/// Bytes that differ from input to input and from place to place.
fn bytes(len: usize, salt: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i * 31 + salt * 7 + i / 251) as u8)
        .collect()
}

#[test]
fn every_length_up_to_a_chunk_and_past_it() {
    let texts: Vec<Vec<u8>> = (0..=CHUNK_LEN + 70).map(|len| bytes(len, len)).collect();
    let inputs: Vec<&[u8]> = texts.iter().map(Vec::as_slice).collect();
    let (lanes, reference) = both(&inputs);
    for (len, (l, r)) in lanes.iter().zip(&reference).enumerate() {
        assert_eq!(l, r, "length {len}");
    }
    // Each length in a small group of its own, beside shorter inputs.
    for input in &inputs {
        let group = [
            &input[..],
            &input[..input.len() / 2],
            b"",
            &input[..input.len() / 3],
        ];
        for n in 1..=group.len() {
            let (lanes, reference) = both(&group[..n]);
            assert_eq!(lanes, reference, "length {} in a group of {n}", input.len());
        }
    }
}

#[test]
fn a_known_hash() {
    // blake3("abc"), from the BLAKE3 reference implementation; a group
    // large enough for the lanes.
    let mut out = [[0u8; 32]; 4];
    let abc: &[u8] = b"abc";
    hash_many(&[abc; 4], &mut out);
    for hash in out {
        assert_eq!(
            blake3::Hash::from(hash).to_hex().as_str(),
            "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
    }
}

#[test]
fn nothing_to_hash() {
    hash_many(&[], &mut []);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_mix_of_lengths(lens in prop::collection::vec(
        prop_oneof![0usize..=80, 0usize..=CHUNK_LEN, 900usize..=3000], 0..100), salt in 0usize..1000) {
        let texts: Vec<Vec<u8>> = lens.iter().enumerate().map(|(i, &len)| bytes(len, salt + i)).collect();
        let inputs: Vec<&[u8]> = texts.iter().map(Vec::as_slice).collect();
        let (lanes, reference) = both(&inputs);
        prop_assert_eq!(lanes, reference);
    }

    #[test]
    fn inputs_at_any_offset(data in prop::collection::vec(any::<u8>(), 0..4000), cuts in prop::collection::vec((0usize..4000, 0usize..1100), 1..40)) {
        let inputs: Vec<&[u8]> = cuts.iter().map(|&(at, len)| {
            let at = at.min(data.len());
            &data[at..(at + len).min(data.len())]
        }).collect();
        let (lanes, reference) = both(&inputs);
        prop_assert_eq!(lanes, reference);
    }
}
