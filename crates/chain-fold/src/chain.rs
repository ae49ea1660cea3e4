//! One execution's events by id, and the hop walk from a tip back to genesis.

use crate::append_log::AppendLog;
use crate::event::{Event, EventId};
use crate::lineage::Lineage;
use crate::spine::{Spine, SpineOrder};

/// The hop bound of today's walk. The walk also stops at the first revisited event, so this
/// bound is only reached by chains longer than it.
pub(crate) const DEFAULT_WALK_LIMIT: usize = 5_000_000;

/// Why a walk could not produce a spine.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Incomplete {
    /// The requested tip is not indexed (yet): the staleness guard.
    #[error("tip {0} is not indexed")]
    TipMissing(EventId),
    /// The walk reached an event whose `prev_event_id` names this id, which is not indexed.
    #[error("hop to {0} is not indexed")]
    MissingHop(EventId),
    /// The walk reached a root without passing a `playbook_started` event.
    #[error("the walk reached a root without passing playbook_started")]
    NoGenesis,
    /// The links loop: this event was reached twice.
    #[error("the chain loops through event {0}")]
    Cycle(EventId),
    /// The walk took more hops than the configured limit.
    #[error("the walk exceeded its hop limit")]
    WalkLimit,
    /// A build without an expected head found no event to start from (the execution has
    /// nothing indexed).
    #[error("the execution has no indexed events")]
    NoEvents,
}

/// One execution's events by id.
///
/// # Representation
///
/// Events arrive near causal order, and ids grow with arrival almost always. So a chain
/// keeps two parts:
///
/// - **the ascending log**: every event whose id was above everything indexed when it
///   arrived, in arrival order, which is also ascending id order. It is an append-only list
///   whose versions share one buffer, so indexing such an event writes it in place behind
///   the chain's length and `clone` is O(1). A lookup gallops back from the newest event
///   (O(1) for the tip), and a walk's hop to the event just before it in the log (the
///   common case) is one comparison.
/// - **the late map**: events that arrived below the largest id (fan-out inversions, late
///   deliveries), in a persistent map. Empty in the common case, where it costs nothing.
///
/// A redelivery that *rewrites* an event of the ascending log copies the log (O(len)):
/// rewrites are rare, and the copy keeps every published version unchanged.
///
/// ```
/// use chain_fold::{Chain, Event, Incomplete, SpineOrder};
///
/// let mut chain = Chain::new(SpineOrder::Causal);
/// chain.apply(Event::minimal(1, 7, None, "playbook_started"));
/// chain.apply(Event::minimal(2, 7, Some(1), "step"));
/// let snapshot = chain.clone(); // O(1)
/// chain.apply(Event::minimal(3, 7, Some(2), "step")); // in place, behind the snapshot
///
/// assert_eq!(chain.walk_from(3).unwrap().ids(), vec![1, 2, 3]);
/// assert_eq!(snapshot.walk_from(3).unwrap_err(), Incomplete::TipMissing(3));
/// ```
#[derive(Clone)]
pub struct Chain {
    order: SpineOrder,
    /// Hops, saturated to `u32` (the default is 5,000,000).
    walk_limit: u32,
    /// Whether every event of the ascending log names the one before it as its `prev` (the
    /// first names none): then no event there names a missing link, and
    /// [`Chain::missing_links`] need not look (unless an event arrived late). Kept on each
    /// append; a rewrite in the log clears it for good (the scan then decides). It fits in
    /// the padding after `walk_limit`.
    linked: bool,
    /// Events that arrived above every indexed id, in arrival (= ascending id) order.
    ascending: AppendLog<Event>,
    /// Events that arrived below the largest indexed id.
    late: Late,
    /// The events' resident bytes (their allocations).
    event_bytes: usize,
    rewrites: u64,
    /// The id of the event applied last whose id was new (`EventId::MIN` while empty).
    newest: EventId,
    /// Which cached spines this version may reuse (see [`crate::lineage`]).
    lineage: Lineage,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("order", &self.order)
            .field("len", &self.len())
            .field("late", &self.late.len())
            .field("bytes", &self.bytes())
            .field("rewrites", &self.rewrites)
            .finish()
    }
}

impl Default for Chain {
    fn default() -> Self {
        Chain::new(SpineOrder::default())
    }
}

/// The late map: absent (one null pointer in the chain) until the first late event, then
/// a persistent map shared between versions.
#[derive(Clone, Default)]
struct Late(Option<crate::sync::Arc<imbl::OrdMap<EventId, Event>>>);

impl Late {
    fn get(&self, id: &EventId) -> Option<&Event> {
        self.0.as_ref()?.get(id)
    }

    fn contains_key(&self, id: &EventId) -> bool {
        self.get(id).is_some()
    }

    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |map| map.len())
    }

    fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Inserts, sharing the map's nodes with other versions (O(log n) path copy).
    fn insert(&mut self, id: EventId, event: Event) {
        let map = self.0.get_or_insert_with(Default::default);
        crate::sync::make_mut(map).insert(id, event);
    }

    fn values(&self) -> impl Iterator<Item = &Event> + '_ {
        self.0.iter().flat_map(|map| map.values())
    }
}

/// The late map's cost per entry beyond the event itself: the entry, and a share of the
/// persistent B-tree's partly filled nodes (estimated; late events are rare).
const LATE_ENTRY_BYTES: usize = 2 * std::mem::size_of::<(EventId, Event)>() + 16;

impl Chain {
    /// An empty chain whose spines use `order`.
    pub fn new(order: SpineOrder) -> Chain {
        Chain {
            order,
            walk_limit: DEFAULT_WALK_LIMIT as u32,
            linked: true,
            ascending: AppendLog::default(),
            late: Late::default(),
            event_bytes: 0,
            rewrites: 0,
            newest: EventId::MIN,
            lineage: Lineage::fresh(),
        }
    }

    /// Sets the hop bound of every walk (default 5,000,000).
    /// The chain starts a fresh lineage: a spine built under another limit is not reused.
    pub fn with_walk_limit(mut self, hops: usize) -> Chain {
        self.walk_limit = u32::try_from(hops).unwrap_or(u32::MAX);
        self.lineage.restart();
        self
    }

    /// Indexes `event`, overwriting an event with the same id (at-least-once redelivery).
    /// Returns true if the id was new.
    ///
    /// An event above every indexed id is appended in place (O(1) amortized); an event
    /// below it goes to the late map (O(log n)). A redelivery never double counts: the
    /// byte ledger is adjusted by the difference. A redelivery that *differs* from what is
    /// indexed (another payload, type or `prev`) is a rewrite: the last delivery wins, as
    /// today, [`Chain::rewrites`] increments, and no spine built before it is reused. An
    /// identical redelivery changes nothing.
    ///
    /// Each change also moves the chain along its lineage: a spine is reused only by the
    /// version it was built on or a later version of the same chain with no rewrite between
    /// them, never by a sibling clone changed another way, an earlier version, or another
    /// chain of the same execution (see [`advance`](crate::advance)).
    pub fn apply(&mut self, event: Event) -> bool {
        let id = event.id();
        let last = self.ascending.as_slice().last();
        if last.is_none_or(|last| id > last.id()) {
            self.linked &= event.prev() == last.map(Event::id);
            self.event_bytes += event.resident_bytes();
            self.newest = id;
            self.ascending.push(event);
            self.lineage.advance();
            return true;
        }
        if let Some(at) = self.position(id) {
            let old = &self.ascending.as_slice()[at];
            if *old != event {
                self.event_bytes = self.event_bytes - old.resident_bytes() + event.resident_bytes();
                self.rewrites += 1;
                self.lineage.restart();
                self.linked = false;
                self.ascending = self.ascending.replaced(at, event);
            }
            return false;
        }
        let added = event.resident_bytes();
        match self.late.get(&id) {
            Some(old) if *old == event => false,
            Some(old) => {
                self.event_bytes = self.event_bytes - old.resident_bytes() + added;
                self.rewrites += 1;
                self.lineage.restart();
                self.late.insert(id, event);
                false
            }
            None => {
                self.event_bytes += added;
                self.newest = id;
                self.late.insert(id, event);
                self.lineage.advance();
                true
            }
        }
    }

    /// Where `id` is in the ascending log.
    ///
    /// A galloping search from the end: builds ask for tips, which are the newest events,
    /// so the last event is checked first and the range doubles back from there. An id
    /// `d` events from the end costs O(log d) probes (each one reads an event's header,
    /// likely a cache miss on a long chain), not O(log n).
    fn position(&self, id: EventId) -> Option<usize> {
        let log = self.ascending.as_slice();
        let mut low = log.len();
        let mut step = 1;
        // Invariant: every event at or past `low` has an id above `id`.
        while low > 0 {
            let probe = low.saturating_sub(step);
            match log[probe].id().cmp(&id) {
                std::cmp::Ordering::Equal => return Some(probe),
                std::cmp::Ordering::Less => {
                    // `id`, if present, lies in (probe, low).
                    return log[probe + 1..low]
                        .binary_search_by_key(&id, Event::id)
                        .ok()
                        .map(|at| probe + 1 + at);
                }
                std::cmp::Ordering::Greater => {
                    low = probe;
                    step *= 2;
                }
            }
        }
        None
    }

    /// Is `id` indexed?
    /// O(1) for an id above every indexed one, O(log n) otherwise.
    pub fn contains(&self, id: EventId) -> bool {
        self.max_id().is_some_and(|max| id <= max)
            && (self.position(id).is_some()
                || (!self.late.is_empty() && self.late.contains_key(&id)))
    }

    /// The event with this id.
    pub fn get(&self, id: EventId) -> Option<&Event> {
        match self.position(id) {
            Some(at) => self.ascending.as_slice().get(at),
            None if self.late.is_empty() => None,
            None => self.late.get(&id),
        }
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.ascending.len() + self.late.len()
    }

    /// True when no event is indexed.
    pub fn is_empty(&self) -> bool {
        self.ascending.len() == 0
    }

    /// What this chain keeps alive on the heap, which the byte ledger charges: every
    /// event's allocation ([`Event::resident_bytes`]), the ascending log's buffer, and an
    /// estimate of the late map's nodes.
    pub fn bytes(&self) -> usize {
        self.event_bytes + self.ascending.heap_bytes() + self.late.len() * LATE_ENTRY_BYTES
    }

    /// The largest indexed id (the legacy head; see docs/domain.md in the repository for why the tip is
    /// not the max id).
    pub fn max_id(&self) -> Option<EventId> {
        self.ascending.as_slice().last().map(Event::id)
    }

    /// The event that arrived last among those whose id was new: the newest link of the
    /// chain in arrival order (where the server's next `prev_event_id` points, when the
    /// WAL delivers in the server's order). Not the largest id under fan-out (`1 <- 2 <- 3 <- 100 <- 50`: the newest is 50). A
    /// redelivery, identical or a rewrite, does not change it. `None` while empty.
    ///
    /// ```
    /// use chain_fold::{Chain, Event, SpineOrder};
    ///
    /// let mut chain = Chain::new(SpineOrder::Causal);
    /// assert_eq!(chain.newest(), None);
    /// chain.apply(Event::minimal(100, 7, None, "playbook_started"));
    /// chain.apply(Event::minimal(50, 7, Some(100), "step"));
    /// chain.apply(Event::minimal(100, 7, None, "playbook_started")); // redelivered
    /// assert_eq!((chain.newest(), chain.max_id()), (Some(50), Some(100)));
    /// ```
    pub fn newest(&self) -> Option<EventId> {
        (!self.is_empty()).then_some(self.newest)
    }

    /// Whether the chain holds a `playbook_started` event. O(1) when the genesis has the
    /// smallest id (the common case), O(n) otherwise.
    pub fn holds_genesis(&self) -> bool {
        self.iter().any(Event::is_genesis)
    }

    /// The ids that events of this chain name as their `prev_event_id` and that the chain
    /// does not hold, ascending, each once: the holes a walk would stop at. Empty (and no
    /// allocation) for a chain whose every link is held. O(1) in the common case, where each
    /// event arrived above the last and named it, none arrived late and none was rewritten
    /// (kept as a flag on each append); otherwise
    /// one comparison per event that links to the one before it and a lookup for any other.
    ///
    /// ```
    /// use chain_fold::{Chain, Event, SpineOrder};
    ///
    /// let mut chain = Chain::new(SpineOrder::Causal);
    /// chain.apply(Event::minimal(1, 7, None, "playbook_started"));
    /// chain.apply(Event::minimal(3, 7, Some(2), "step")); // 2 never arrived
    /// chain.apply(Event::minimal(4, 7, Some(3), "step"));
    /// chain.apply(Event::minimal(9, 7, Some(8), "step")); // nor 8
    /// assert_eq!(chain.missing_links(), vec![2, 8]);
    /// chain.apply(Event::minimal(2, 7, Some(1), "step"));
    /// assert_eq!(chain.missing_links(), vec![8]);
    /// ```
    pub fn missing_links(&self) -> Vec<EventId> {
        if self.linked && self.late.is_empty() {
            return Vec::new();
        }
        let log = self.ascending.as_slice();
        let mut missing = Vec::new();
        for (at, event) in log.iter().enumerate() {
            let Some(prev) = event.prev() else { continue };
            let before = at.checked_sub(1).map(|b| log[b].id());
            if before != Some(prev) && !self.contains(prev) {
                missing.push(prev);
            }
        }
        for event in self.late.values() {
            if let Some(prev) = event.prev().filter(|&prev| !self.contains(prev)) {
                missing.push(prev);
            }
        }
        missing.sort_unstable();
        missing.dedup();
        missing
    }

    /// The spine order of this chain.
    pub fn order(&self) -> SpineOrder {
        self.order
    }

    /// How many redeliveries replaced an event with a different one.
    pub fn rewrites(&self) -> u64 {
        self.rewrites
    }

    /// This version's place in its history, which a spine built on it records.
    pub(crate) fn lineage(&self) -> &Lineage {
        &self.lineage
    }

    /// How many indexed events arrived below the largest id (the slow path).
    pub fn late_len(&self) -> usize {
        self.late.len()
    }

    /// The event `id`, found from a walk standing at position `from` of the ascending log
    /// (`usize::MAX` when it stands in the late map): the event just before it in the log is
    /// checked first, which is where a hop lands when events arrived in causal order.
    fn locate(&self, id: EventId, from: usize) -> Option<(&Event, usize)> {
        let log = self.ascending.as_slice();
        let before = from.checked_sub(1).and_then(|at| log.get(at));
        if let Some(before) = before.filter(|before| before.id() == id) {
            return Some((before, from - 1));
        }
        match self.position(id) {
            Some(at) => Some((&log[at], at)),
            None if self.late.is_empty() => None,
            None => self.late.get(&id).map(|event| (event, usize::MAX)),
        }
    }

    /// All events, in ascending id order.
    pub fn iter(&self) -> impl Iterator<Item = &Event> + '_ {
        let mut ascending = self.ascending.as_slice().iter().peekable();
        let mut late = self.late.values().peekable();
        std::iter::from_fn(move || match (ascending.peek(), late.peek()) {
            (Some(a), Some(l)) if l.id() < a.id() => late.next(),
            (Some(_), _) => ascending.next(),
            (None, _) => late.next(),
        })
    }

    /// Walks from `tip` back to the root and returns the spine, or why there is none.
    ///
    /// Costs one lookup per hop. A corrupt chain costs at most `len() + 1` hops: a walk
    /// that takes more hops than there are events must have revisited one, and stops with
    /// [`Incomplete::Cycle`].
    pub fn walk_from(&self, tip: EventId) -> Result<Spine, Incomplete> {
        let walk = self.walk_back(tip, None)?;
        Ok(self.spine_of(tip, walk))
    }

    /// The spine of `tip` from a walk that reached the root. A walk that visited the log's
    /// first events, one after the other, is a prefix of the log in either order (the log
    /// ascends by id), and its spine is that prefix, sharing the log: nothing is copied.
    pub(crate) fn spine_of(&self, tip: EventId, walk: Walk) -> Spine {
        if let Some(run) = walk.log_run.as_ref().filter(|run| run.start == 0) {
            let prefix = self.log_prefix(run.end);
            return Spine::over_log(
                tip,
                self.order,
                self.lineage.mark(),
                prefix,
                walk.payload_bytes,
            );
        }
        let mut events = walk.into_tip_first(self);
        match self.order {
            SpineOrder::Causal => events.reverse(),
            SpineOrder::EventId => events.sort_by_key(Event::id),
        }
        Spine::assemble(tip, self.order, self.lineage.mark(), events)
    }

    /// The ascending log's first `len` events, sharing its buffer.
    pub(crate) fn log_prefix(&self, len: usize) -> AppendLog<Event> {
        self.ascending.truncated(len)
    }

    /// The events at the ascending log's positions `run`, last first (a walk's order),
    /// as handles of their own.
    fn log_run_tip_first(&self, run: std::ops::Range<usize>) -> impl Iterator<Item = Event> + '_ {
        self.ascending.as_slice()[run].iter().rev().cloned()
    }

    /// Follows `prev` links from `from` until a root, or until `stop_at` is reached (not
    /// included). Returns the events visited, tip first.
    pub(crate) fn walk_back(
        &self,
        from: EventId,
        stop_at: Option<EventId>,
    ) -> Result<Walk, Incomplete> {
        let mut walker = Walker::start(self, from, stop_at)?;
        loop {
            if let Some(done) = walker.step() {
                return done;
            }
        }
    }
}

/// A walk back from one event, one hop per [`Walker::step`], so a caller can interleave it
/// with other work (`advance` runs it in lockstep with a scan of the cached spine).
///
/// Events that arrived in causal order sit in the ascending log one before the other, so
/// a walk usually visits a run of consecutive log positions. While it does, the walker
/// clones nothing: the run is the walk's result ([`Walk::log_run`]), and a spine of it
/// shares the chain's log. The first hop off the run (into the late map, or past events
/// of another branch) copies the run's handles out, and the walk collects from there on.
pub(crate) struct Walker<'c> {
    chain: &'c Chain,
    current: Option<&'c Event>,
    /// `current`'s position in the ascending log (`usize::MAX` in the late map).
    at: usize,
    stop_at: Option<EventId>,
    /// Events visited, tip first, once the walk left its log run (empty while on it).
    events: Vec<Event>,
    /// Events visited.
    hops: usize,
    /// While every event visited is in the ascending log, one position below the one
    /// before: the tip's position (the run is `top + 1 - hops ..= top`).
    run_top: Option<usize>,
    /// The visited events' payload bytes.
    payload_bytes: usize,
    genesis: bool,
}

impl<'c> Walker<'c> {
    pub(crate) fn start(
        chain: &'c Chain,
        from: EventId,
        stop_at: Option<EventId>,
    ) -> Result<Walker<'c>, Incomplete> {
        let (current, at) = chain
            .locate(from, usize::MAX)
            .ok_or(Incomplete::TipMissing(from))?;
        Ok(Walker {
            chain,
            current: Some(current),
            at,
            stop_at,
            events: Vec::new(),
            hops: 0,
            run_top: (at != usize::MAX).then_some(at),
            payload_bytes: 0,
            genesis: false,
        })
    }

    /// One hop. `None` while the walk goes on; the walk's result once it ended.
    pub(crate) fn step(&mut self) -> Option<Result<Walk, Incomplete>> {
        let current = self.current?;
        if self.hops >= self.chain.walk_limit as usize {
            return Some(Err(Incomplete::WalkLimit));
        }
        if self.hops >= self.chain.len() {
            // More hops than events: some event was visited twice, and so is this one.
            return Some(Err(Incomplete::Cycle(current.id())));
        }
        self.genesis |= current.is_genesis();
        self.visit(current);
        let Some(prev) = current.prev() else {
            self.current = None;
            if !self.genesis {
                return Some(Err(Incomplete::NoGenesis));
            }
            return Some(Ok(self.finish(false)));
        };
        if Some(prev) == self.stop_at {
            self.current = None;
            return Some(Ok(self.finish(true)));
        }
        match self.chain.locate(prev, self.at) {
            Some((next, at)) => {
                self.current = Some(next);
                self.at = at;
                None
            }
            None => {
                self.current = None;
                Some(Err(Incomplete::MissingHop(prev)))
            }
        }
    }

    /// Counts `current` (at `self.at`) into the walk: still on the log run, or collected.
    fn visit(&mut self, current: &Event) {
        self.payload_bytes += current.payload().len();
        match self.run_top {
            // `hops < top + 1` holds on the run, so the sum does not overflow.
            Some(top) if self.at != usize::MAX && self.at + self.hops == top => {}
            Some(top) => {
                // Off the run: its events, tip first, then this one.
                self.events.reserve(self.hops + 1);
                self.events
                    .extend(self.chain.log_run_tip_first(top + 1 - self.hops..top + 1));
                self.events.push(current.clone());
                self.run_top = None;
            }
            None => self.events.push(current.clone()),
        }
        self.hops += 1;
    }

    fn finish(&mut self, reached_stop: bool) -> Walk {
        Walk {
            events: std::mem::take(&mut self.events),
            log_run: self.run_top.map(|top| top + 1 - self.hops..top + 1),
            len: self.hops,
            payload_bytes: self.payload_bytes,
            reached_stop,
        }
    }
}

/// A finished walk: the events visited, as a run of the ascending log or collected.
pub(crate) struct Walk {
    /// Visited events, tip first, when the walk left the log (empty when `log_run` is set).
    events: Vec<Event>,
    /// The positions of the ascending log the walk visited, when they are exactly a run of
    /// consecutive positions (walked from the top down).
    pub(crate) log_run: Option<std::ops::Range<usize>>,
    /// Events visited.
    pub(crate) len: usize,
    /// Their payloads' total length.
    pub(crate) payload_bytes: usize,
    /// True when the walk stopped at the requested event rather than at a root.
    pub(crate) reached_stop: bool,
}

impl Walk {
    /// The visited events, tip first, as handles of their own.
    pub(crate) fn into_tip_first(self, chain: &Chain) -> Vec<Event> {
        match self.log_run {
            Some(run) => chain.log_run_tip_first(run).collect(),
            None => self.events,
        }
    }
}

#[cfg(all(test, target_pointer_width = "64", not(chain_fold_loom)))]
mod tests {
    /// The linked flag lives in the padding after `walk_limit`: a chain is still nine words
    /// (every slot and every version holds one, and the memory bench counts them).
    #[test]
    fn a_chain_is_nine_words() {
        assert_eq!(std::mem::size_of::<super::Chain>(), 72);
    }
}
