//! Projecting whole streams: [`project`] for events in memory and
//! [`Projector::transform_chunks`] for chunks streamed from a store. The only
//! file that uses rayon.

use rayon::prelude::*;

use crate::view::{LogEvent, Plan, Projector, ViewEvent};

/// The view of a whole stream in memory: two passes (plan, transform), the
/// second in parallel over chunks. Output is in log order and does not
/// depend on the number of threads (I6).
pub fn project(events: &[LogEvent]) -> Vec<ViewEvent> {
    let mut plan = Plan::new();
    for e in events {
        plan.observe(e.seq, e.turn, &e.event);
    }
    let projector = plan.finish();
    let chunks: Vec<Vec<LogEvent>> = events.chunks(1024).map(<[LogEvent]>::to_vec).collect();
    projector
        .transform_chunks(chunks)
        .into_iter()
        .flatten()
        .collect()
}

impl Projector {
    /// Decodes and transforms chunks in parallel: `decode` turns one input
    /// chunk into raw events (it may read a store), then each event is
    /// transformed. The output chunks are in the input's order.
    pub fn decode_and_transform<C, E>(
        &self,
        chunks: Vec<C>,
        decode: impl Fn(C) -> Result<Vec<LogEvent>, E> + Sync,
    ) -> Result<Vec<Vec<ViewEvent>>, E>
    where
        C: Send,
        E: Send,
    {
        self.decode_transform_map(chunks, decode, |view| view)
    }

    /// Like [`Projector::decode_and_transform`], and then `finish` turns
    /// each chunk's view events into what the caller wants (formatted
    /// output, say), still on the worker threads.
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
                for event in raw {
                    self.transform(event, &mut out);
                }
                Ok(finish(out))
            })
            .collect()
    }

    /// Transforms chunks of consecutive raw events in parallel; the output
    /// chunks are in the input's order.
    pub fn transform_chunks(&self, chunks: Vec<Vec<LogEvent>>) -> Vec<Vec<ViewEvent>> {
        chunks
            .into_par_iter()
            .map(|chunk| {
                let mut out = Vec::with_capacity(chunk.len());
                for raw in chunk {
                    self.transform(raw, &mut out);
                }
                out
            })
            .collect()
    }
}
