//! One execution's events by id, and the hop walk from a tip back to genesis.

use crate::event::{Event, EventId};
use crate::spine::{Spine, SpineOrder};

/// The hop bound of today's walk. The walk also stops at the first revisited event, so this
/// bound is only reached by chains longer than it.
pub const DEFAULT_WALK_LIMIT: usize = 5_000_000;

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
/// A `Chain` is a persistent map: `clone` is O(1) and shares every node with the original,
/// and `apply` copies only the O(log n) path it changes when the chain is shared. That is
/// what lets an engine publish an immutable snapshot of a chain per batch without copying
/// it.
///
/// ```
/// use chain_fold::{Chain, Event, Incomplete, SpineOrder};
///
/// let mut chain = Chain::new(SpineOrder::Causal);
/// chain.apply(Event::minimal(1, 7, None, "playbook_started"));
/// chain.apply(Event::minimal(2, 7, Some(1), "step"));
/// let snapshot = chain.clone(); // O(1)
/// chain.apply(Event::minimal(3, 7, Some(2), "step"));
///
/// assert_eq!(chain.walk_from(3).unwrap().ids(), vec![1, 2, 3]);
/// assert_eq!(snapshot.walk_from(3).unwrap_err(), Incomplete::TipMissing(3));
/// ```
#[derive(Clone)]
pub struct Chain {
    order: SpineOrder,
    walk_limit: usize,
    events: imbl::OrdMap<EventId, Event>,
    /// The largest indexed id, kept beside the map so that the commonest miss (a tip above
    /// everything indexed: the drain has not applied it yet) is decided without touching
    /// the map's nodes, which the drain has just reallocated.
    max: Option<EventId>,
    bytes: usize,
    rewrites: u64,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("order", &self.order)
            .field("len", &self.events.len())
            .field("bytes", &self.bytes)
            .field("rewrites", &self.rewrites)
            .finish()
    }
}

impl Default for Chain {
    fn default() -> Self {
        Chain::new(SpineOrder::default())
    }
}

impl Chain {
    /// An empty chain whose spines use `order`.
    pub fn new(order: SpineOrder) -> Chain {
        Chain {
            order,
            walk_limit: DEFAULT_WALK_LIMIT,
            events: imbl::OrdMap::new(),
            max: None,
            bytes: 0,
            rewrites: 0,
        }
    }

    /// Sets the hop bound of every walk (default [`DEFAULT_WALK_LIMIT`]).
    pub fn with_walk_limit(mut self, hops: usize) -> Chain {
        self.walk_limit = hops;
        self
    }

    /// Indexes `event`, overwriting an event with the same id (at-least-once redelivery).
    /// Returns true if the id was new.
    ///
    /// A redelivery never double counts: the byte ledger is adjusted by the difference.
    /// A redelivery that *differs* from what is indexed (another payload, type or `prev`) is
    /// a rewrite: the last delivery wins, as today, and [`Chain::rewrites`] increments so
    /// that cached spines built on the old version are not reused.
    pub fn apply(&mut self, event: Event) -> bool {
        let added = event.resident_bytes();
        // `None` orders below every `Some`.
        self.max = self.max.max(Some(event.id()));
        match self.events.insert(event.id(), event) {
            None => {
                self.bytes += added;
                true
            }
            Some(old) => {
                self.bytes = self.bytes - old.resident_bytes() + added;
                let same = self.events.get(&old.id()).is_some_and(|new| *new == old);
                if !same {
                    self.rewrites += 1;
                }
                false
            }
        }
    }

    /// Is `id` indexed?
    /// O(1) for an id above every indexed one, O(log n) otherwise.
    pub fn contains(&self, id: EventId) -> bool {
        self.max.is_some_and(|max| id <= max) && self.events.contains_key(&id)
    }

    /// The event with this id.
    pub fn get(&self, id: EventId) -> Option<&Event> {
        self.events.get(&id)
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when no event is indexed.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The resident cost the byte ledger charges for these events (sum of
    /// [`Event::resident_bytes`]).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The largest indexed id (the legacy head; see docs/domain.md in the repository for why the tip is
    /// not the max id).
    pub fn max_id(&self) -> Option<EventId> {
        self.max
    }

    /// The spine order of this chain.
    pub fn order(&self) -> SpineOrder {
        self.order
    }

    /// How many redeliveries replaced an event with a different one.
    pub fn rewrites(&self) -> u64 {
        self.rewrites
    }

    /// All events, in ascending id order.
    pub fn iter(&self) -> impl Iterator<Item = &Event> + '_ {
        self.events.values()
    }

    /// Walks from `tip` back to the root and returns the spine, or why there is none.
    ///
    /// Costs one lookup per hop. A corrupt chain costs at most `len() + 1` hops: a walk
    /// that takes more hops than there are events must have revisited one, and stops with
    /// [`Incomplete::Cycle`].
    pub fn walk_from(&self, tip: EventId) -> Result<Spine, Incomplete> {
        let walk = self.walk_back(tip, None)?;
        Ok(self.spine_of(tip, walk.events))
    }

    pub(crate) fn spine_of(&self, tip: EventId, tip_first: Vec<Event>) -> Spine {
        let mut events = tip_first;
        match self.order {
            SpineOrder::Causal => events.reverse(),
            SpineOrder::EventId => events.sort_by_key(Event::id),
        }
        Spine::assemble(tip, self.order, self.rewrites, events.into())
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
pub(crate) struct Walker<'c> {
    chain: &'c Chain,
    current: Option<&'c Event>,
    stop_at: Option<EventId>,
    events: Vec<Event>,
    genesis: bool,
}

impl<'c> Walker<'c> {
    pub(crate) fn start(
        chain: &'c Chain,
        from: EventId,
        stop_at: Option<EventId>,
    ) -> Result<Walker<'c>, Incomplete> {
        let current = chain
            .events
            .get(&from)
            .ok_or(Incomplete::TipMissing(from))?;
        Ok(Walker {
            chain,
            current: Some(current),
            stop_at,
            events: Vec::new(),
            genesis: false,
        })
    }

    /// One hop. `None` while the walk goes on; the walk's result once it ended.
    pub(crate) fn step(&mut self) -> Option<Result<Walk, Incomplete>> {
        let current = self.current?;
        if self.events.len() >= self.chain.walk_limit {
            return Some(Err(Incomplete::WalkLimit));
        }
        if self.events.len() >= self.chain.events.len() {
            // More hops than events: some event was visited twice, and so is this one.
            return Some(Err(Incomplete::Cycle(current.id())));
        }
        self.genesis |= current.is_genesis();
        self.events.push(current.clone());
        let Some(prev) = current.prev() else {
            self.current = None;
            if !self.genesis {
                return Some(Err(Incomplete::NoGenesis));
            }
            return Some(Ok(Walk {
                events: std::mem::take(&mut self.events),
                reached_stop: false,
            }));
        };
        if Some(prev) == self.stop_at {
            self.current = None;
            return Some(Ok(Walk {
                events: std::mem::take(&mut self.events),
                reached_stop: true,
            }));
        }
        match self.chain.events.get(&prev) {
            Some(next) => {
                self.current = Some(next);
                None
            }
            None => {
                self.current = None;
                Some(Err(Incomplete::MissingHop(prev)))
            }
        }
    }
}

pub(crate) struct Walk {
    /// Visited events, tip first.
    pub(crate) events: Vec<Event>,
    /// True when the walk stopped at the requested event rather than at a root.
    pub(crate) reached_stop: bool,
}
