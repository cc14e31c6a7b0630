//! Shared by the benchmarks: the sizes they run and the store pipeline.

use std::hint::black_box;

use convstore_engine::pipeline::{plan, stream, Scope};
use convstore_store::{ConversationId, Store};

/// 10^4 and 10^5 events; with `CONVSTORE_BENCH_FULL` set, also 10^6.
pub fn sizes() -> Vec<u64> {
    let mut sizes = vec![10_000, 100_000];
    if std::env::var_os("CONVSTORE_BENCH_FULL").is_some() {
        sizes.push(1_000_000);
    }
    sizes
}

/// What `convstore project` runs, without writing the output: the plan
/// from the store's side data, then the parallel decode and transform.
pub fn project_from_store(store: &Store, id: &ConversationId, len: u64) -> u64 {
    let scope = Scope { end: len };
    let projector = plan(store, id, scope, None).expect("plan");
    let mut count = 0u64;
    stream(store, id, scope, &projector, |_| {
        count += 1;
        Ok(())
    })
    .expect("stream");
    black_box(count)
}
