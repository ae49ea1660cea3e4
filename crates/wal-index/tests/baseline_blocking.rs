//! The comparators' blocking forms finish wherever they are called, a Tokio task included.
//!
//! `MutexIndex` runs each synchronous method's async body to completion over Tokio's fair
//! mutex. Inside a task, every acquisition spends the task's cooperative budget; once it
//! is spent, a lock that is free still answers `Pending` (and wakes itself), and a blocking
//! call never yields back to the scheduler that would refill the budget, so the call spun
//! forever after about 128 acquisitions. These tests bound the wait instead of hanging.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use wal_index::baseline::{MutexIndex, ShardedMutexIndex};
use wal_index::{Event, IndexConfig, StateIndex, WalIndex};

const CALLS: i64 = 300;

/// Runs `CALLS` synchronous applies and builds of `index` inside one Tokio task (one poll:
/// no await between them) and reports whether they finished within a generous bound.
fn finishes_inside_a_task<I: StateIndex + Send + Sync + 'static>(index: Arc<I>) -> bool {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async move {
            tokio::spawn(async move {
                for id in 1..=CALLS {
                    let ty = if id == 1 { "playbook_started" } else { "step" };
                    index.apply(Event::minimal(id, 7, (id > 1).then(|| id - 1), ty));
                    assert!(index.build(7, Some(id)).spine.is_some());
                }
                index.stats()
            })
            .await
            .unwrap()
        });
        let _ = done.send(());
    });
    // A spinning call never sends; the thread is left behind when the test ends.
    finished.recv_timeout(Duration::from_secs(60)).is_ok()
}

#[test]
fn mutex_index_blocking_methods_finish_inside_a_tokio_task() {
    assert!(
        finishes_inside_a_task(Arc::new(MutexIndex::new(IndexConfig::default()))),
        "{CALLS} synchronous applies and builds inside one task did not finish in 60 s"
    );
}

#[test]
fn every_index_finishes_inside_a_tokio_task() {
    assert!(finishes_inside_a_task(Arc::new(WalIndex::new(
        IndexConfig::default()
    ))));
    assert!(finishes_inside_a_task(Arc::new(ShardedMutexIndex::new(
        IndexConfig::default()
    ))));
}
