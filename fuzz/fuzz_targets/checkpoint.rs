//! Arbitrary bytes as a checkpoint file, through both readers (over the bytes, and a block
//! at a time over a reader, as a restore from a directory reads): never a panic, never an
//! allocation the bytes do not hold, and a file one reader takes the other takes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wal_index::checkpoint::Checkpoint;

fuzz_target!(|data: &[u8]| {
    let whole = Checkpoint::decode(data);
    let streamed = Checkpoint::read_from(&mut &data[..]);
    match (&whole, &streamed) {
        (Ok(checkpoint), Ok((again, read))) => {
            assert_eq!(checkpoint, again);
            assert_eq!(*read, data.len() as u64);
            // What verifies writes back as the same bytes.
            assert_eq!(checkpoint.encode(), data);
        }
        // Which refusal comes first may differ (the reader over the bytes checks every
        // block's checksum before decoding any; the streaming one decodes as it goes).
        (Err(_), Err(_)) => {}
        _ => panic!("one reader took the file and the other refused it: {whole:?} / {streamed:?}"),
    }
});
