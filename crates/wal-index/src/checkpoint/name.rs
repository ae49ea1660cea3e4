//! The one naming rule of every store: a checkpoint's name says when it was written and
//! sorts by it, is never reused, and reads back to itself.
//!
//! `checkpoint-<ms>-<n>.sbix` where one process writes (a directory), and
//! `checkpoint-<ms>-<writer>-<n>.sbix` where several may at once (a bucket's prefix during a
//! roll: `<writer>` is random per store). `<ms>` is the writer's clock in milliseconds since
//! the Unix epoch, 20 digits; `<n>` counts names within one millisecond, 6 digits;
//! `<writer>` is 16 hexadecimal digits. With every field at a fixed width, the names' order
//! as text is their order in time, and a name that does not read back to itself (`-x`, a
//! sign, another width, another tool's file) is not a checkpoint's.

use std::fmt;

const PREFIX: &str = "checkpoint-";
const SUFFIX: &str = ".sbix";

/// A checkpoint's name, its parts in the order they sort by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct CheckpointName {
    millis: u128,
    writer: Option<u64>,
    n: u64,
}

impl CheckpointName {
    /// The name a store writes next: at the clock's time, above `newest` (this store's
    /// newest name) whatever the clock says.
    pub(crate) fn next(newest: Option<CheckpointName>, writer: Option<u64>) -> CheckpointName {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        match newest {
            Some(newest) if now <= newest.millis => CheckpointName {
                millis: newest.millis,
                writer,
                n: newest.n + 1,
            },
            _ => CheckpointName {
                millis: now,
                writer,
                n: 0,
            },
        }
    }

    /// The name `text` reads as, if a store of this crate wrote it.
    pub(crate) fn parse(text: &str) -> Option<CheckpointName> {
        let stem = text.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
        let mut parts = stem.split('-');
        let millis = parts.next()?;
        let (writer, n) = match (parts.next()?, parts.next(), parts.next()) {
            (n, None, _) => (None, n),
            (writer, Some(n), None) => (Some(u64::from_str_radix(writer, 16).ok()?), n),
            _ => return None,
        };
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if !(digits(millis) && digits(n)) {
            return None;
        }
        let name = CheckpointName {
            millis: millis.parse().ok()?,
            writer,
            n: n.parse().ok()?,
        };
        (name.to_string() == text).then_some(name)
    }
}

impl fmt::Display for CheckpointName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (millis, n) = (self.millis, self.n);
        match self.writer {
            None => write!(f, "{PREFIX}{millis:020}-{n:06}{SUFFIX}"),
            Some(writer) => write!(f, "{PREFIX}{millis:020}-{writer:016x}-{n:06}{SUFFIX}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_to_themselves_and_sort_by_time() {
        let one = CheckpointName::next(None, None);
        let two = CheckpointName::next(Some(one), None);
        assert!(two > one && two.to_string() > one.to_string());
        assert_eq!(CheckpointName::parse(&one.to_string()), Some(one));
        let shared = CheckpointName::next(None, Some(0xfeed));
        assert_eq!(CheckpointName::parse(&shared.to_string()), Some(shared));
        // A clock that went back still names above the newest.
        let ahead = CheckpointName {
            millis: u128::from(u64::MAX),
            writer: None,
            n: 4,
        };
        assert_eq!(CheckpointName::next(Some(ahead), None).n, 5);
        for other in [
            "checkpoint-x.sbix",
            "checkpoint-00000000000000000001-000001.sbix.tmp",
            "checkpoint-1-1.sbix",
            "checkpoint-00000000000000000001-+00001.sbix",
            "checkpoint-00000000000000000001-000000000000feed-000001-1.sbix",
            "checkpoint-00000000000000000001-00000000000FEED0-000001.sbix",
        ] {
            assert_eq!(CheckpointName::parse(other), None, "{other}");
        }
    }
}
