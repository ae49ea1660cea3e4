//! What a read that decodes in the index's mode must hand over.

use chain_fold::Event;

/// `slim`, read in [`DecodeMode::Slim`](wal_index::ingest::DecodeMode::Slim), is `whole`
/// (the same read in `Whole`) projected, event for event, and each was decoded once: an
/// event already slim projects to itself, nothing parsed again.
pub fn assert_slim_read_of(slim: &[Event], whole: &[Event]) {
    assert_eq!(slim.len(), whole.len(), "the same events, slim and whole");
    for (slim, whole) in slim.iter().zip(whole) {
        assert_eq!(slim.payload(), whole.to_slim().payload());
        assert!(
            slim.to_slim().ptr_eq(slim),
            "already slim: nothing to parse again"
        );
    }
}
