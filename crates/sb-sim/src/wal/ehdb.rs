//! A run's WAL on an EHDB writer: the producer publishes through the writer's ingest face,
//! the drain reads its feed face from the run's own first sequence.

use std::io;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use wal_index::ingest::Backoff;
use wal_source_ehdb::{EhdbConfig, EhdbPublisher, EhdbSource};

use super::PublisherFigures;
use crate::workload::Item;

/// The writer's two faces, from `ehdb://HOST:FEED_PORT?ingest=PORT[&shards=N]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EhdbTarget {
    /// The feed face, `HOST:PORT`.
    pub feed: String,
    /// The ingest face, `HOST:PORT` (`None`: a read-only target, as `replay` takes).
    pub ingest: Option<String>,
    /// The writer's shard count (default 1); a run drains every shard.
    pub shards: u32,
}

impl EhdbTarget {
    /// Parses an `ehdb://` URL; `ingest` says whether the ingest port is required.
    pub fn parse(url: &str, ingest: bool) -> Result<EhdbTarget, String> {
        let usage = if ingest {
            "expected ehdb://HOST:FEED_PORT?ingest=PORT[&shards=N]"
        } else {
            "expected ehdb://HOST:FEED_PORT[?shards=N]"
        };
        let rest = url
            .strip_prefix("ehdb://")
            .ok_or_else(|| format!("{url:?}: {usage}"))?;
        let (feed, query) = rest.split_once('?').unwrap_or((rest, ""));
        let host = match feed.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => host,
            _ => return Err(format!("{url:?}: no HOST:PORT ({usage})")),
        };
        let mut target = EhdbTarget {
            feed: feed.to_owned(),
            ingest: None,
            shards: 1,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("ingest", port)) if port.parse::<u16>().is_ok() => {
                    target.ingest = Some(format!("{host}:{port}"));
                }
                Some(("shards", n)) => match n.parse::<u32>() {
                    Ok(n @ 1..=4096) => target.shards = n,
                    _ => return Err(format!("{url:?}: shards must be 1–4096 ({usage})")),
                },
                _ => return Err(format!("{url:?}: unknown or malformed {pair:?} ({usage})")),
            }
        }
        if ingest && target.ingest.is_none() {
            return Err(format!(
                "{url:?}: the producer needs the ingest port ({usage})"
            ));
        }
        Ok(target)
    }
}

/// The producer of a run on the writer, with what it did.
///
/// Each run numbers its records from a base above any earlier run's (the wall clock in
/// nanoseconds), and its drain subscribes from that base, so a writer shared by several
/// runs (each engine's, one after another) serves each run only its own records. The writer
/// must not hold records above the base from another producer.
///
/// A failed publication (the writer killed or restarting) is an outage: the producer
/// reconnects and sends the same record again, for up to two minutes, saying so once a
/// second. This writer version appends a re-sent record whose first copy it had stored, so
/// the drain can see it twice; the index absorbs the second copy.
pub struct EhdbFeed {
    target: EhdbTarget,
    ingest: String,
    publisher: Option<EhdbPublisher>,
    /// The sequence before the run's first record: where its drain starts.
    base: u64,
    next: u64,
    figures: PublisherFigures,
    /// What the writer holds of the run, once counted.
    stored: std::sync::OnceLock<(u64, u64)>,
}

impl EhdbFeed {
    /// How long a record may wait for the writer before the run fails.
    const OUTAGE_MAX: Duration = Duration::from_secs(120);
    /// The pause between attempts to publish one record.
    const RETRY: Backoff = Backoff {
        first: Duration::from_millis(25),
        max: Duration::from_millis(500),
    };

    /// The producer for one run on `target` (its ingest face is dialled on first use).
    pub fn open(target: &EhdbTarget) -> io::Result<EhdbFeed> {
        let ingest = target.ingest.clone().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "no ingest port to publish to")
        })?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(io::Error::other)?;
        let base = u64::try_from(now.as_nanos()).map_err(io::Error::other)?;
        Ok(EhdbFeed {
            target: target.clone(),
            ingest,
            publisher: None,
            base,
            next: base + 1,
            figures: PublisherFigures::default(),
            stored: std::sync::OnceLock::new(),
        })
    }

    /// Where a pool finds the run: every shard, from the run's base.
    pub fn pool_wal(&self) -> super::PoolWal {
        super::PoolWal::Ehdb {
            feed: self.target.feed.clone(),
            shards: self.target.shards,
            cursor: self.base,
        }
    }

    /// The per-execution read a pool on this writer has: its feed, every shard, from the
    /// run's base.
    pub fn rehydrate(&self) -> wal_source_ehdb::EhdbRehydrate {
        wal_source_ehdb::EhdbRehydrate::new(self.target.feed.clone(), self.target.shards)
            .cursor(self.base)
    }

    /// The drain's source: every shard, from the run's base.
    pub fn source(&self) -> io::Result<EhdbSource> {
        EhdbSource::connect(
            EhdbConfig::new(self.target.feed.clone())
                .shards(0..self.target.shards)
                .cursor(self.base),
        )
    }

    /// Publishes one record (an undecodable one under execution 0: the drain counts it as
    /// bad), waiting out an outage of the writer.
    pub fn append(&mut self, item: &Item) -> io::Result<()> {
        let execution = item.ids.map_or(0, |(execution, _)| execution);
        let payload = String::from_utf8_lossy(&item.payload);
        let transaction = format!("sb-sim-{}", self.next);
        let started = Instant::now();
        let mut said = started - Duration::from_secs(60);
        let mut failures = 0u32;
        // Whether an earlier attempt reached the writer (the record may be stored already).
        let mut sent_before = false;
        loop {
            let sequence = self.next;
            let error = match self.publisher() {
                Err(error) => {
                    self.figures.send_failures += 1;
                    error
                }
                Ok(publisher) => {
                    match publisher.publish(sequence, execution, &transaction, &payload) {
                        Ok(ack) if ack == sequence => break,
                        Ok(ack) => {
                            return Err(io::Error::other(format!(
                                "the writer acknowledged sequence {ack} for a record published as {sequence}"
                            )));
                        }
                        Err(error) => {
                            self.figures.ack_failures += 1;
                            sent_before = true;
                            error
                        }
                    }
                }
            };
            self.publisher = None;
            self.figures.waits += 1;
            if started.elapsed() >= Self::OUTAGE_MAX {
                return Err(io::Error::other(format!(
                    "the writer at {} did not acknowledge a record for {:?}: {error}",
                    self.ingest,
                    Self::OUTAGE_MAX
                )));
            }
            if said.elapsed() >= Duration::from_secs(1) {
                said = Instant::now();
                eprintln!(
                    "sb-sim: the writer at {} is away for {:.1} s ({error}); re-sending",
                    self.ingest,
                    started.elapsed().as_secs_f64()
                );
            }
            failures += 1;
            std::thread::sleep(Self::RETRY.pause(failures));
        }
        if sent_before {
            self.figures.republished += 1;
        }
        self.figures.published += 1;
        self.next += 1;
        Ok(())
    }

    fn publisher(&mut self) -> io::Result<&mut EhdbPublisher> {
        if self.publisher.is_none() {
            self.publisher = Some(EhdbPublisher::connect(
                &self.ingest,
                Duration::from_secs(5),
            )?);
        }
        Ok(self.publisher.as_mut().expect("connected above"))
    }

    /// What the producer did, and what the writer holds of the run (`stored`).
    ///
    /// A writer that acknowledged every record at its first attempt holds them all. After an
    /// outage (a writer killed and restarted can lose acknowledged records), `stored` is
    /// counted by reading the records its feed serves after the run's base, every shard, 60 s
    /// each at most, once per run. A shard that sends nothing within that counts as holding
    /// none: this writer version sends no frame while nothing follows the cursor.
    ///
    /// `stored` counts distinct sequences, `stored_again` the further copies: this writer
    /// stores a re-sent record again under the sequence of its first copy, and its feed
    /// serves a subscriber only records above its cursor, so a drain already past that
    /// sequence is never served the copy (`tests/real_writer.rs` in wal-source-ehdb shows it
    /// with the writer alone). Counting copies would report them as records the drain did
    /// not consume.
    pub fn figures(&self) -> PublisherFigures {
        let (stored, stored_again) =
            if self.figures.ack_failures == 0 && self.figures.send_failures == 0 {
                (self.figures.published, 0)
            } else {
                *self.stored.get_or_init(|| self.count_stored())
            };
        PublisherFigures {
            stored,
            stored_again,
            ..self.figures
        }
    }

    /// Distinct sequences the writer holds after the run's base, and further copies.
    fn count_stored(&self) -> (u64, u64) {
        let (mut stored, mut again) = (0, 0);
        for shard in 0..self.target.shards {
            let mut records = 0u64;
            // The feed serves a shard's records in ascending sequence: a copy follows the
            // record whose sequence it reuses.
            let mut last = None;
            let read = wal_source_ehdb::read_retained(
                &self.target.feed,
                shard,
                self.base,
                Duration::from_secs(60),
                wal_source_ehdb::frame::Limits::default(),
                |record| {
                    if last == Some(record.position) {
                        again += 1;
                    } else {
                        records += 1;
                    }
                    last = Some(record.position);
                },
            );
            match read {
                Ok(_) => stored += records,
                Err(error) if error.kind() == io::ErrorKind::TimedOut && records == 0 => {}
                Err(error) => {
                    eprintln!(
                        "sb-sim: cannot count shard {shard}'s records on the writer: {error}"
                    );
                    stored += records;
                }
            }
        }
        (stored, again)
    }
}

impl std::fmt::Debug for EhdbFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EhdbFeed")
            .field("target", &self.target)
            .field("base", &self.base)
            .field("next", &self.next)
            .field("figures", &self.figures)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A re-send whose first copy the writer had stored is stored again under the same
    /// sequence (wal-source-ehdb's `tests/real_writer.rs` shows it with the writer alone):
    /// the count of what the writer holds takes sequences, with the copy apart, so the
    /// report does not take the copy for a record the drain failed to consume.
    #[test]
    fn a_copy_stored_under_its_first_sequence_is_counted_apart() {
        let Some(writer) = wal_source_ehdb::test_writer::Writer::start("sb-sim-count-stored")
        else {
            return;
        };
        let port = writer.ingest.rsplit_once(':').unwrap().1;
        let target =
            EhdbTarget::parse(&format!("ehdb://{}?ingest={port}", writer.feed), true).unwrap();
        let mut feed = EhdbFeed::open(&target).unwrap();
        let payload = |id: i64| {
            let prev = if id > 1 {
                format!(",\"prev_event_id\":{}", id - 1)
            } else {
                String::new()
            };
            format!(r#"{{"event_id":{id},"execution_id":5{prev}}}"#)
        };
        for id in 1..=3 {
            let item = Item {
                payload: bytes::Bytes::from(payload(id)),
                ids: Some((5, id)),
                triggers: false,
                tail: Vec::new(),
                repeat: false,
            };
            feed.append(&item).unwrap();
        }
        let mut again = EhdbPublisher::connect(&writer.ingest, Duration::from_secs(5)).unwrap();
        let ack = again
            .publish(feed.base + 3, 5, "again", &payload(3))
            .unwrap();
        assert_eq!(ack, feed.base + 3, "stored under the first copy's sequence");
        assert_eq!(feed.count_stored(), (3, 1));
    }

    #[test]
    fn a_url_names_both_faces_and_the_shards() {
        let target = EhdbTarget::parse("ehdb://10.0.0.5:7070?ingest=7071&shards=4", true).unwrap();
        assert_eq!(target.feed, "10.0.0.5:7070");
        assert_eq!(target.ingest.as_deref(), Some("10.0.0.5:7071"));
        assert_eq!(target.shards, 4);
        let read_only = EhdbTarget::parse("ehdb://writer:7070", false).unwrap();
        assert_eq!((read_only.ingest, read_only.shards), (None, 1));
    }

    #[test]
    fn a_malformed_url_is_an_error_that_says_what_is_expected() {
        for url in [
            "ehdb://writer:7070",
            "ehdb://writer?ingest=7071",
            "ehdb://writer:7070?ingest=x",
            "ehdb://writer:7070?ingest=7071&shards=0",
            "ehdb://writer:7070?ingest=7071&colour=red",
            "nats://writer:7070",
        ] {
            let error = EhdbTarget::parse(url, true).unwrap_err();
            assert!(error.contains("expected ehdb://"), "{url}: {error}");
        }
    }
}
