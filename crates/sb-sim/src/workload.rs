//! The simulated worker pool's WAL: executions, their events in arrival order, and which
//! events trigger a drive. Deterministic for a seed.

use std::io::{self, BufRead, Write};

use bytes::Bytes;
use chain_fold::{Event, EventId, ExecutionId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Shape of the generated workload. Defaults follow the production note's calibration
/// figures (see `docs/simulator.md`).
#[derive(Debug, Clone)]
pub struct Shape {
    /// Executions running at the same time.
    pub concurrent_executions: usize,
    /// Mean events per execution (genesis and terminal included).
    pub events_per_execution: usize,
    /// Probability that an event arrives after a sibling with a higher id (fan-out
    /// inversion: the tip carries a lower id than its predecessor).
    pub inversion_rate: f64,
    /// Probability that an event triggers a drive (production: ~5 builds per execution
    /// of ~27 events).
    pub drive_rate: f64,
    /// Mean full-envelope size in bytes. Each event's size is drawn from a log-normal
    /// distribution with this mean (σ = 0.75, so the median is ~75% of it), between 1 KiB
    /// and 8× the mean; the bulk is a `result` of small row objects, the shape that makes
    /// a parsed envelope expensive to clone.
    pub payload_bytes: usize,
    /// Probability that a drive is dispatched twice for the same head (the second build
    /// is a cache hit; production: 14.6% of builds).
    pub repeat_rate: f64,
    /// The most tail events a dispatch carries: the payloads published for its execution
    /// since its previous dispatch, the tip last.
    pub tail_max: usize,
    /// Seed of the generator.
    pub seed: u64,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            concurrent_executions: 64,
            events_per_execution: 27,
            inversion_rate: 0.1,
            drive_rate: 0.185,
            payload_bytes: 73_000,
            repeat_rate: 0.2,
            tail_max: 8,
            seed: 1,
        }
    }
}

/// One WAL record in arrival order.
#[derive(Debug, Clone)]
pub struct Item {
    /// The payload as published to the WAL.
    pub payload: Bytes,
    /// Execution and event id (`None` for a deliberately bad record).
    pub ids: Option<(ExecutionId, EventId)>,
    /// Whether a drive is dispatched for this event with it as the expected head.
    pub triggers: bool,
    /// The dispatch's `tail_events`: its execution's payloads since its previous dispatch,
    /// this one last (empty unless `triggers`).
    pub tail: Vec<Bytes>,
    /// The drive is dispatched a second time for the same head after the first ends.
    pub repeat: bool,
}

struct Live {
    execution_id: ExecutionId,
    remaining: usize,
    head: Option<EventId>,
    /// An id allocated earlier and held back to arrive after a higher one.
    held: Option<EventId>,
    /// Payloads published since this execution's last dispatch.
    since_dispatch: Vec<Bytes>,
}

/// The text of a row's `note`: rows are mostly prose (log lines, messages, rendered
/// values), a few fields of structure around a long string.
const NOTE: &str = "the quick brown fox jumps over the lazy dog while the step writes its output \
rows to the result set and the worker reports progress back to the server for the next step of \
the playbook, retrying failed calls with backoff and recording every attempt in the log stream ";
/// How much of [`NOTE`] each row carries.
const NOTE_LEN: usize = 180;

/// Pre-rendered `result.rows` text: rows `0..n` joined by commas, and where each ends, so
/// an envelope of any size is a prefix copy instead of a serialization.
struct Rows {
    text: String,
    ends: Vec<usize>,
}

impl Rows {
    fn new(max_bytes: usize) -> Rows {
        use std::fmt::Write as _;
        let mut text = String::with_capacity(max_bytes + 128);
        let mut ends = Vec::new();
        let mut row = 0u64;
        while text.len() < max_bytes {
            if row > 0 {
                text.push(',');
            }
            let _ = write!(
                text,
                r#"{{"row":{row},"name":"item-{row}","qty":{},"ok":{},"tags":["t{}","u{}"],"note":"{}"}}"#,
                row % 17,
                row.is_multiple_of(3),
                row % 7,
                row % 11,
                &NOTE[(row as usize * 7) % 64..][..NOTE_LEN]
            );
            ends.push(text.len());
            row += 1;
        }
        Rows { text, ends }
    }

    /// The longest prefix of whole rows no longer than `bytes` (at least one row).
    fn prefix(&self, bytes: usize) -> &str {
        let n = self.ends.partition_point(|&end| end <= bytes).max(1);
        &self.text[..self.ends[n - 1]]
    }
}

/// A deterministic stream of WAL items for `shape`.
pub struct Generator {
    shape: Shape,
    rng: ChaCha8Rng,
    next_id: EventId,
    next_execution: ExecutionId,
    live: Vec<Live>,
    rows: Rows,
}

impl Generator {
    /// A generator starting at execution 1 and event 1.
    pub fn new(shape: Shape) -> Generator {
        Generator::starting_at(shape, 1, 1)
    }

    /// A generator whose ids start at the given values.
    pub fn starting_at(shape: Shape, first_execution: ExecutionId, first_id: EventId) -> Generator {
        let rng = ChaCha8Rng::seed_from_u64(shape.seed ^ (first_execution as u64).rotate_left(17));
        let rows = Rows::new(Self::max_bytes(&shape));
        Generator {
            shape,
            rng,
            next_id: first_id,
            next_execution: first_execution,
            live: Vec::new(),
            rows,
        }
    }

    fn max_bytes(shape: &Shape) -> usize {
        shape.payload_bytes.saturating_mul(8).max(1024)
    }

    /// One envelope size: log-normal with mean `payload_bytes`, σ = 0.75, clamped.
    fn envelope_size(&mut self) -> usize {
        const SIGMA: f64 = 0.75;
        let mean = self.shape.payload_bytes as f64;
        if mean <= 0.0 {
            return 0;
        }
        // Box-Muller from two uniforms (rand's core has no normal distribution).
        let (u1, u2): (f64, f64) = (self.rng.random_range(f64::EPSILON..1.0), self.rng.random());
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        let mu = mean.ln() - SIGMA * SIGMA / 2.0;
        let size = (mu + SIGMA * z).exp();
        (size as usize).clamp(
            1024.min(Self::max_bytes(&self.shape)),
            Self::max_bytes(&self.shape),
        )
    }

    fn start_execution(&mut self) -> Live {
        let mean = self.shape.events_per_execution.max(2);
        // Lengths spread around the mean (±50%), a few much longer.
        let mut len = self.rng.random_range(mean / 2..=mean + mean / 2).max(2);
        if self.rng.random_bool(0.02) {
            len *= 10;
        }
        let live = Live {
            execution_id: self.next_execution,
            remaining: len,
            head: None,
            held: None,
            since_dispatch: Vec::new(),
        };
        self.next_execution += 1;
        live
    }

    /// The next WAL item.
    pub fn next_item(&mut self) -> Item {
        while self.live.len() < self.shape.concurrent_executions.max(1) {
            let live = self.start_execution();
            self.live.push(live);
        }
        let slot = self.rng.random_range(0..self.live.len());
        let inversion = self
            .rng
            .random_bool(self.shape.inversion_rate.clamp(0.0, 1.0));
        let triggers = self.rng.random_bool(self.shape.drive_rate.clamp(0.0, 1.0));
        let repeat = self.rng.random_bool(self.shape.repeat_rate.clamp(0.0, 1.0));
        let size = self.envelope_size();
        let live = &mut self.live[slot];
        let first = live.head.is_none();
        let last = live.remaining == 1;
        // An inversion allocates two ids, publishes the higher one now and holds the lower
        // one back to be the very next event of this execution.
        let id = match live.held.take() {
            Some(held) => held,
            None if inversion && !first && live.remaining > 2 => {
                let low = self.next_id;
                self.next_id += 2;
                live.held = Some(low);
                low + 1
            }
            None => {
                self.next_id += 1;
                self.next_id - 1
            }
        };
        let event_type = if first {
            "playbook_started"
        } else if last {
            "playbook_completed"
        } else {
            "step_completed"
        };
        let event = envelope(
            id,
            live.execution_id,
            live.head,
            event_type,
            &self.rows,
            size,
        );
        live.head = Some(id);
        live.remaining -= 1;
        let execution_id = live.execution_id;
        let triggers = triggers && !last;
        live.since_dispatch.push(event.clone());
        let tail = if triggers {
            let since = std::mem::take(&mut live.since_dispatch);
            let skip = since.len().saturating_sub(self.shape.tail_max);
            since.into_iter().skip(skip).collect()
        } else {
            Vec::new()
        };
        if last {
            self.live.swap_remove(slot);
        }
        Item {
            payload: event,
            ids: Some((execution_id, id)),
            triggers,
            tail,
            repeat: triggers && repeat,
        }
    }

    /// The next `n` items.
    pub fn take(&mut self, n: usize) -> Vec<Item> {
        (0..n).map(|_| self.next_item()).collect()
    }
}

/// A full envelope with the fields real WAL events carry, about `size` bytes, most of them
/// in `result.rows`.
fn envelope(
    id: EventId,
    execution_id: ExecutionId,
    prev: Option<EventId>,
    event_type: &str,
    rows: &Rows,
    size: usize,
) -> Bytes {
    use std::fmt::Write as _;
    let prev = prev.map_or("null".to_owned(), |p| p.to_string());
    let mut out = String::with_capacity(size + 512);
    let _ = write!(
        out,
        concat!(
            r#"{{"event_id":{id},"execution_id":{exec},"catalog_id":7,"event_type":"{ty}","#,
            r#""status":"COMPLETED","created_at":"2026-10-01T12:00:00Z","node_id":"node-{node}","#,
            r#""node_name":"step","node_type":"python","parent_event_id":{prev},"#,
            r#""prev_event_id":{prev},"parent_execution_id":null,"#,
            r#""context":{{"workload":"sb-sim","vars":{{"region":"eu","attempt":1,"limits":[1,2,3]}}}},"#,
            r#""result":{{"status":"ok","rows":["#
        ),
        id = id,
        exec = execution_id,
        ty = event_type,
        node = id % 97,
        prev = prev,
    );
    let room = size.saturating_sub(out.len() + 120);
    out.push_str(rows.prefix(room));
    out.push_str(r#"]},"meta":{"attempt":1},"error":null,"worker_id":"worker-0"}"#);
    Bytes::from(out)
}

/// Writes items as JSON lines (one payload per line).
pub fn write_jsonl(items: &[Item], mut out: impl Write) -> io::Result<()> {
    for item in items {
        out.write_all(&item.payload)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Reads a JSON-lines WAL into items. Lines that do not decode are kept (without ids) so
/// the drain counts them as bad records; blank lines are skipped. Triggers are drawn with
/// `drive_rate` from `seed`, so a replay is reproducible too.
pub fn read_jsonl(input: impl BufRead, drive_rate: f64, seed: u64) -> io::Result<Vec<Item>> {
    let mut payloads = Vec::new();
    for line in input.split(b'\n') {
        let mut line = line?;
        while matches!(line.last(), Some(b'\r')) {
            line.pop();
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        payloads.push(Bytes::from(line));
    }
    Ok(items_from_payloads(payloads, drive_rate, seed))
}

/// Replay items from raw WAL payloads (file lines, broker messages): each decodable,
/// non-terminal event triggers a drive with probability `drive_rate` (seeded).
pub fn items_from_payloads(
    payloads: impl IntoIterator<Item = Bytes>,
    drive_rate: f64,
    seed: u64,
) -> Vec<Item> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    payloads
        .into_iter()
        .map(|payload| {
            let event = Event::from_json_bytes(payload.clone()).ok();
            let triggers = rng.random_bool(drive_rate.clamp(0.0, 1.0));
            let triggers = triggers && event.as_ref().is_some_and(|e| !e.is_terminal());
            Item {
                ids: event.as_ref().map(|e| (e.execution_id(), e.id())),
                tail: if triggers {
                    vec![payload.clone()]
                } else {
                    Vec::new()
                },
                triggers,
                payload,
                repeat: false,
            }
        })
        .collect()
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("shape", &self.shape)
            .field("next_id", &self.next_id)
            .field("next_execution", &self.next_execution)
            .field("live", &self.live.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chain_fold::{Chain, SpineOrder};
    use std::collections::BTreeMap;

    #[test]
    fn same_seed_same_workload() {
        let a = Generator::new(Shape::default()).take(500);
        let b = Generator::new(Shape::default()).take(500);
        assert!(
            a.iter()
                .zip(&b)
                .all(|(x, y)| x.payload == y.payload && x.triggers == y.triggers)
        );
    }

    #[test]
    fn envelopes_follow_the_calibrated_sizes_and_parse_as_json() {
        let items = Generator::new(Shape::default()).take(2_000);
        let sizes: Vec<usize> = items.iter().map(|i| i.payload.len()).collect();
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        assert!(
            (55_000.0..95_000.0).contains(&mean),
            "mean envelope {mean} B"
        );
        assert!(
            sizes
                .iter()
                .all(|&s| (900..=8 * 73_000 + 1024).contains(&s))
        );
        for item in items.iter().step_by(97) {
            let value: serde_json::Value = serde_json::from_slice(&item.payload).unwrap();
            assert!(
                value["result"]["rows"]
                    .as_array()
                    .is_some_and(|r| !r.is_empty())
            );
        }
    }

    #[test]
    fn a_dispatch_carries_its_executions_payloads_since_the_last_dispatch() {
        let items = Generator::new(Shape::default()).take(5_000);
        let mut since: BTreeMap<ExecutionId, Vec<Bytes>> = BTreeMap::new();
        let mut repeats = 0;
        for item in &items {
            let (exec, _) = item.ids.unwrap();
            let pending = since.entry(exec).or_default();
            pending.push(item.payload.clone());
            if item.triggers {
                let skip = pending.len().saturating_sub(8);
                assert_eq!(item.tail, pending[skip..].to_vec());
                assert_eq!(item.tail.last(), Some(&item.payload), "the tip is last");
                pending.clear();
                repeats += usize::from(item.repeat);
            } else {
                assert!(item.tail.is_empty() && !item.repeat);
            }
        }
        assert!(repeats > 50, "repeated dispatches are generated: {repeats}");
    }

    #[test]
    fn every_finished_execution_walks_from_its_last_arrival_with_inversions() {
        let shape = Shape {
            inversion_rate: 0.3,
            payload_bytes: 2_000,
            ..Shape::default()
        };
        let items = Generator::new(shape).take(5_000);
        let mut chains: BTreeMap<ExecutionId, (Chain, EventId, bool)> = BTreeMap::new();
        let mut inversions = 0;
        for item in &items {
            let event = Event::from_json_bytes(item.payload.clone()).unwrap();
            let entry = chains
                .entry(event.execution_id())
                .or_insert_with(|| (Chain::new(SpineOrder::Causal), 0, false));
            if event.prev().is_some_and(|p| p > event.id()) {
                inversions += 1;
            }
            entry.1 = event.id();
            entry.2 |= event.is_terminal();
            entry.0.apply(event);
        }
        assert!(inversions > 50, "inversions are generated: {inversions}");
        for (exec, (chain, tip, _)) in chains.iter().filter(|(_, c)| c.2) {
            let spine = chain
                .walk_from(*tip)
                .unwrap_or_else(|e| panic!("{exec}: {e}"));
            assert_eq!(spine.len(), chain.len());
        }
    }
}
