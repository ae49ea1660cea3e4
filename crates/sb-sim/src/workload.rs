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
    /// Payload size in bytes (full envelope, padded in `result`).
    pub payload_bytes: usize,
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
            payload_bytes: 1024,
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
}

struct Live {
    execution_id: ExecutionId,
    remaining: usize,
    head: Option<EventId>,
    /// An id allocated earlier and held back to arrive after a higher one.
    held: Option<EventId>,
}

/// A deterministic stream of WAL items for `shape`.
pub struct Generator {
    shape: Shape,
    rng: ChaCha8Rng,
    next_id: EventId,
    next_execution: ExecutionId,
    live: Vec<Live>,
    pad: String,
}

impl Generator {
    /// A generator starting at execution 1 and event 1.
    pub fn new(shape: Shape) -> Generator {
        Generator::starting_at(shape, 1, 1)
    }

    /// A generator whose ids start at the given values (so a cold-start backlog and the
    /// live phase never collide).
    pub fn starting_at(shape: Shape, first_execution: ExecutionId, first_id: EventId) -> Generator {
        let rng = ChaCha8Rng::seed_from_u64(shape.seed ^ (first_execution as u64).rotate_left(17));
        let pad = "r".repeat(shape.payload_bytes.saturating_sub(420));
        Generator {
            shape,
            rng,
            next_id: first_id,
            next_execution: first_execution,
            live: Vec::new(),
            pad,
        }
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
        let event = envelope(id, live.execution_id, live.head, event_type, &self.pad);
        live.head = Some(id);
        live.remaining -= 1;
        let execution_id = live.execution_id;
        if last {
            self.live.swap_remove(slot);
        }
        Item {
            payload: event,
            ids: Some((execution_id, id)),
            triggers: triggers && !last,
        }
    }

    /// The next `n` items.
    pub fn take(&mut self, n: usize) -> Vec<Item> {
        (0..n).map(|_| self.next_item()).collect()
    }
}

/// A full envelope with the fields real WAL events carry, `result` padded to size.
fn envelope(
    id: EventId,
    execution_id: ExecutionId,
    prev: Option<EventId>,
    event_type: &str,
    pad: &str,
) -> Bytes {
    let value = serde_json::json!({
        "event_id": id,
        "execution_id": execution_id,
        "catalog_id": 7,
        "event_type": event_type,
        "status": "COMPLETED",
        "created_at": "2026-10-01T12:00:00Z",
        "node_id": format!("node-{}", id % 97),
        "node_name": "step",
        "node_type": "python",
        "parent_event_id": prev,
        "prev_event_id": prev,
        "parent_execution_id": null,
        "context": {"workload": "sb-sim"},
        "result": {"data": pad},
        "meta": {"attempt": 1},
        "error": null,
        "worker_id": "worker-0",
    });
    Bytes::from(serde_json::to_vec(&value).unwrap_or_default())
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
            Item {
                ids: event.as_ref().map(|e| (e.execution_id(), e.id())),
                triggers: triggers && event.as_ref().is_some_and(|e| !e.is_terminal()),
                payload,
            }
        })
        .collect()
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
    fn every_finished_execution_walks_from_its_last_arrival_with_inversions() {
        let shape = Shape {
            inversion_rate: 0.3,
            payload_bytes: 200,
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
