//! NATS subject matching: whether a subject is one a filter reads (`*` matches one token,
//! `>` the rest, at least one token).

/// Whether `subject` is read by `filter`.
///
/// ```
/// use wal_source_nats::subject::matches;
///
/// assert!(matches("noetl.events.*", "noetl.events.3"));
/// assert!(matches("noetl.>", "noetl.events.3"));
/// assert!(!matches("noetl.events.*", "noetl.events.3.x"));
/// assert!(!matches("noetl.events.1", "noetl.events.2"));
/// assert!(!matches("noetl.>", "noetl"));
/// ```
pub fn matches(filter: &str, subject: &str) -> bool {
    let mut wanted = filter.split('.');
    let mut tokens = subject.split('.');
    loop {
        match (wanted.next(), tokens.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(want), Some(token)) if want == token => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}
