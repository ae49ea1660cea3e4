//! Which shard a record is on: XxHash64 (seed 0) of its `execution_id` string, modulo the
//! shard count, as the writer computes it.

/// The shard of `execution_id` (its decimal text, as the feed carries it) among `shards`.
/// `shards` of 0 is treated as 1.
///
/// ```
/// use wal_source_ehdb::shard_of;
/// assert_eq!(shard_of(42, 1), 0);
/// assert!(shard_of(42, 8) < 8);
/// ```
pub fn shard_of(execution_id: i64, shards: u32) -> u32 {
    let text = execution_id.to_string();
    let hash = xxhash_rust::xxh64::xxh64(text.as_bytes(), 0);
    // The remainder is below `shards`, which is a u32.
    (hash % u64::from(shards.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known answers of XxHash64 with seed 0 (the reference implementation's test vectors),
    /// so the shard function is the writer's, not merely self-consistent.
    #[test]
    fn the_hash_is_xxhash64_with_seed_zero() {
        assert_eq!(xxhash_rust::xxh64::xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxhash_rust::xxh64::xxh64(b"a", 0), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(xxhash_rust::xxh64::xxh64(b"abc", 0), 0x44BC_2CF5_AD77_0999);
    }

    #[test]
    fn every_execution_lands_on_one_shard_below_the_count() {
        for id in [0, 1, 42, i64::MAX, -7] {
            for shards in [1, 2, 3, 16] {
                let shard = shard_of(id, shards);
                assert!(shard < shards);
                assert_eq!(shard, shard_of(id, shards));
            }
        }
        assert_eq!(shard_of(5, 0), 0);
    }
}
