//! Workload builders shared by the benchmarks.
//!
//! Every generator is deterministic: the same arguments give the same events, so runs are
//! comparable across engines and machines.

pub mod lean;
pub mod rows;

use bytes::Bytes;
use chain_fold::{Chain, Event, EventId, ExecutionId, SpineOrder};
use wal_index::{IndexConfig, IndexObserver, StateIndex};

/// A slim payload of `size` bytes (a JSON object padded with a string).
pub fn payload(size: usize) -> Bytes {
    let pad = size.saturating_sub(12);
    Bytes::from(format!(r#"{{"pad":"{}"}}"#, "x".repeat(pad)))
}

/// One execution's linear chain of `len` events with ids `first..first + len`, genesis
/// first; with `terminal`, the last event is `playbook_completed`.
pub fn linear(
    execution: ExecutionId,
    first: EventId,
    len: i64,
    terminal: bool,
    body: &Bytes,
) -> Vec<Event> {
    (0..len)
        .map(|k| {
            let id = first + k;
            let ty = match k {
                0 => "playbook_started",
                k if terminal && k == len - 1 => "playbook_completed",
                _ => "step",
            };
            Event::from_parts(id, execution, (k > 0).then(|| id - 1), ty, body.clone())
        })
        .collect()
}

/// The incremental build's loop (`engines`' bench 3, `lean`'s first group): `iters` times,
/// one event appended to execution 1's chain of ~`len` events (untimed), then `build`
/// timed, spine and JSON hand-out included; the chain is made afresh by `fresh` (a new
/// index holding `len` events, built once) when it outgrows 1.1 `len` + 10. Returns the
/// time spent in `build`.
pub fn time_incremental_builds<I, R>(
    iters: u64,
    len: i64,
    body: &Bytes,
    fresh: impl Fn() -> I,
    apply: impl Fn(&I, Event),
    build: impl Fn(&I, EventId) -> R,
) -> std::time::Duration {
    let limit = len + len / 10 + 10;
    let (mut index, mut tip) = (fresh(), len);
    let mut timed = std::time::Duration::ZERO;
    for _ in 0..iters {
        if tip >= limit {
            (index, tip) = (fresh(), len);
        }
        apply(
            &index,
            Event::from_parts(tip + 1, 1, Some(tip), "step", body.clone()),
        );
        tip += 1;
        let started = std::time::Instant::now();
        let served = build(&index, tip);
        timed += started.elapsed();
        std::hint::black_box(served);
    }
    timed
}

/// An observer that takes every build's duration and records nothing: builds are timed,
/// as a pool's with metrics are, and as the comparators always time them, so rows of
/// different designs compare like with like.
#[derive(Debug)]
pub struct TimedBuilds;

impl IndexObserver for TimedBuilds {}

/// An index with the default configuration whose builds are timed ([`TimedBuilds`]).
pub fn timed_index<I: StateIndex>() -> I {
    I::with_observer(IndexConfig::default(), std::sync::Arc::new(TimedBuilds))
}

/// A chain of `len` events (one execution).
pub fn chain(len: i64, body: &Bytes) -> Chain {
    let mut chain = Chain::new(SpineOrder::Causal);
    for event in linear(1, 1, len, false, body) {
        chain.apply(event);
    }
    chain
}

/// A WAL of `executions` executions of `per_execution` events each, ending in a terminal
/// event, interleaved round-robin over `live` executions at a time as a busy WAL is.
pub fn interleaved(executions: i64, per_execution: i64, live: i64, body: &Bytes) -> Vec<Event> {
    interleaved_from(0, executions, per_execution, live, body)
}

/// [`interleaved`] with executions numbered from `first` (event ids follow them, so WALs
/// from disjoint ranges share no id).
pub fn interleaved_from(
    first: ExecutionId,
    executions: i64,
    per_execution: i64,
    live: i64,
    body: &Bytes,
) -> Vec<Event> {
    let mut out = Vec::with_capacity((executions * per_execution) as usize);
    let live = live.max(1);
    for group in 0..(executions + live - 1) / live {
        let members: Vec<Vec<Event>> = (0..live)
            .map(|e| group * live + e)
            .filter(|&exec| exec < executions)
            .map(|exec| first + exec)
            .map(|exec| linear(exec, exec * per_execution + 1, per_execution, true, body))
            .collect();
        for k in 0..per_execution as usize {
            out.extend(members.iter().map(|m| m[k].clone()));
        }
    }
    out
}
