//! Projecting whole streams: [`project`] for events in memory and
//! [`Projector::decode_transform_map`] for chunks streamed from a store. The
//! only file that uses rayon.

use rayon::prelude::*;

use crate::projector::{LogEvent, Plan, Projector, ViewEvent};

/// The view of a whole stream in memory: two passes (plan, transform), the
/// second in parallel over chunks. Output is in log order and does not
/// depend on the number of threads (I6).
pub fn project(events: &[LogEvent]) -> Vec<ViewEvent> {
    let mut plan = Plan::new();
    for e in events {
        plan.observe(e.seq, e.turn, &e.event);
    }
    let projector = plan.finish();
    let chunks: Vec<&[LogEvent]> = events.chunks(1024).collect();
    let views = projector.decode_transform_map(
        chunks,
        |chunk| Ok::<_, std::convert::Infallible>(chunk.to_vec()),
        |view| view,
    );
    match views {
        Ok(views) => views.into_iter().flatten().collect(),
        Err(never) => match never {},
    }
}

impl Projector {
    /// Decodes, transforms and finishes chunks in parallel: `decode` turns
    /// one input chunk into raw events (it may read a store), each event is
    /// transformed, then `finish` turns the chunk's view events into what the
    /// caller wants (formatted output, say), still on the worker thread. The
    /// results are in the input's order.
    pub fn decode_transform_map<C, E, T>(
        &self,
        chunks: Vec<C>,
        decode: impl Fn(C) -> Result<Vec<LogEvent>, E> + Sync,
        finish: impl Fn(Vec<ViewEvent>) -> T + Sync,
    ) -> Result<Vec<T>, E>
    where
        C: Send,
        E: Send,
        T: Send,
    {
        chunks
            .into_par_iter()
            .map(|chunk| {
                let raw = decode(chunk)?;
                let mut out = Vec::with_capacity(raw.len());
                self.transform_run(raw, &mut out);
                Ok(finish(out))
            })
            .collect()
    }
}
