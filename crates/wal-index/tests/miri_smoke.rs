//! A small concurrent workout of the engine sized for Miri (`scripts/miri.sh`): apply,
//! build, drive, evict and read snapshots from two threads; it asserts in either thread
//! order. Also an ordinary test.

use std::time::Duration;

use chain_fold::Event;
use wal_index::{DriveBudget, DriveFlow, IndexConfig, StateIndex, WalIndex};

fn ev(e: i64, id: i64) -> Event {
    let ty = if id == 1 { "playbook_started" } else { "step" };
    Event::from_parts(
        id,
        e,
        (id > 1).then(|| id - 1),
        ty,
        bytes::Bytes::from_static(b"{}"),
    )
}

#[test]
fn two_threads_apply_build_drive_and_evict() {
    let index = WalIndex::new(IndexConfig::default());
    std::thread::scope(|s| {
        s.spawn(|| {
            for id in 1..=6 {
                index.apply_batch(vec![ev(1, id), ev(2, id)]);
            }
            index.evict(2);
        });
        s.spawn(|| {
            let drive = index.drive(
                1,
                Some(6),
                &DriveFlow::new(DriveBudget {
                    attempts: 50,
                    retry: Duration::from_millis(50),
                }),
            );
            assert_eq!(
                drive.outcome.spine().map(|s| s.ids()),
                Some((1..=6).collect())
            );
            // Execution 2 is resident or already evicted, whichever thread ran first; each
            // order has its assertion. Resident: a whole snapshot of its chain, at least up
            // to the batch before the one that served this drive (each batch publishes
            // execution 1, then 2). Evicted: only it went; execution 1 is still resident.
            match index.chain(2) {
                Some(chain) => {
                    let ids: Vec<i64> = chain.iter().map(|e| e.id()).collect();
                    assert!(chain.iter().all(|e| e.execution_id() == 2));
                    assert!(ids.len() >= 5, "{ids:?}");
                    assert_eq!(ids, (1..=ids.len() as i64).collect::<Vec<_>>());
                }
                None => assert_eq!(index.chain(1).map(|c| c.len()), Some(6)),
            }
        });
    });
    let spine = index.build(1, Some(6)).spine.expect("indexed");
    assert_eq!(
        spine.json_array().to_bytes().as_ref(),
        b"[{},{},{},{},{},{}]"
    );
    assert_eq!(index.stats().executions, 1);
}
