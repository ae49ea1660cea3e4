//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use chain_fold::{Event, EventId, ExecutionId};
use wal_index::DriveFallbacks;
use wal_index::flow::{FallbackRead, ShardAnswer, ShardRead};
use wal_index::ingest::DecodeMode;

/// An event with a minimal envelope; a root is a genesis.
pub fn ev(execution: ExecutionId, id: EventId, prev: Option<EventId>) -> Event {
    let ty = if prev.is_none() {
        "playbook_started"
    } else {
        "step"
    };
    Event::minimal(id, execution, prev, ty)
}

/// A terminal event.
pub fn end(execution: ExecutionId, id: EventId, prev: EventId) -> Event {
    Event::minimal(id, execution, Some(prev), "playbook_completed")
}

/// A linear chain `first..first+len` of one execution, genesis first.
pub fn linear(execution: ExecutionId, first: EventId, len: i64) -> Vec<Event> {
    (first..first + len)
        .map(|id| ev(execution, id, (id > first).then(|| id - 1)))
        .collect()
}

/// Instantiates a generic test function for every engine.
#[macro_export]
macro_rules! for_each_engine {
    ($($name:ident),* $(,)?) => {
        mod lockfree {
            $( #[test] fn $name() { super::$name::<wal_index::WalIndex>() } )*
        }
        mod mutex {
            $( #[test] fn $name() { super::$name::<wal_index::baseline::MutexIndex>() } )*
        }
        mod sharded {
            $( #[test] fn $name() { super::$name::<wal_index::baseline::ShardedMutexIndex>() } )*
        }
        mod papaya {
            $( #[test] fn $name() { super::$name::<wal_index::baseline::PapayaIndex>() } )*
        }
    };
}

/// The caller's sources after the deadline (`shard: None`: no shard reader).
pub struct Sources {
    pub shard: Option<Vec<Event>>,
    pub retained: Option<Vec<Event>>,
}

impl DriveFallbacks for Sources {
    fn state_shard(&self, _: ExecutionId, _: DecodeMode) -> ShardRead<'_> {
        let answer = match &self.shard {
            Some(events) => ShardAnswer::Events(events.clone()),
            None => ShardAnswer::NoReader,
        };
        Box::pin(std::future::ready(answer))
    }
    fn retained(&self, _: ExecutionId, _: DecodeMode) -> FallbackRead<'_> {
        Box::pin(std::future::ready(self.retained.clone()))
    }
}
