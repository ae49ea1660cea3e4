//! Every build, on every path the crate has, against a reference walk written from
//! docs/domain.md alone ("Chains and spines"), not from this crate's code: a plain map of
//! events by id, the walk from the tip along `prev_event_id` to a root, incomplete if the tip
//! or a hop is absent, if no `playbook_started` was passed, or if an event repeats; causal
//! order root to tip, or ascending ids; and the served JSON is today's bytes, each payload
//! parsed into a `serde_json::Value` and the spine's values serialized as one array.
//!
//! The generator produces the odd chains too: roots that are not genesis, a genesis in the
//! middle of a chain or none at all, a second root part way, redeliveries that move an
//! event's `prev_event_id` or change its payload, tips at every depth below the cached head,
//! and forks of a chain (siblings changed two ways) whose spines are fed to the *same*
//! caches as the main chain's. Three caches build every target: today's `SpineCache`, the
//! engine's `advance` (which serves an ancestor as a prefix of the cached spine and keeps
//! the longer one), and `advance` fed the spine of the previous build whatever chain it was
//! built on.
//!
//! `REFERENCE_CASES` sets the case count (default 2,000, about a second; `scripts/differential-long.sh` runs
//! it for as long as it is given).

use std::collections::HashMap;

use chain_fold::{AdvanceOutcome, Chain, Event, Incomplete, Spine, SpineCache, SpineOrder};
use proptest::prelude::*;

/// One version of one event, as a producer sends it.
#[derive(Debug, Clone)]
struct Version {
    id: i64,
    prev: Option<i64>,
    genesis: bool,
    marker: u8,
}

impl Version {
    /// The producer's bytes: the envelope's keys in a fixed non-sorted order, with spaces.
    fn text(&self) -> String {
        let prev = self.prev.map_or("null".to_string(), |p| p.to_string());
        let ty = if self.genesis {
            "playbook_started"
        } else {
            "step"
        };
        format!(
            r#"{{ "marker" : {}, "prev_event_id": {prev}, "event_type":"{ty}", "execution_id":1, "event_id":{} }}"#,
            self.marker, self.id
        )
    }

    fn event(&self) -> Event {
        Event::from_json(self.text().as_bytes()).unwrap()
    }
}

/// The reference: the last version delivered of each id.
#[derive(Debug, Clone, Default)]
struct Reference {
    events: HashMap<i64, Version>,
}

/// How a reference walk ended without a spine.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NoSpine {
    TipMissing(i64),
    MissingHop(i64),
    NoGenesis,
    Cycle,
}

impl Reference {
    fn walk(&self, tip: i64, order: SpineOrder) -> Result<(Vec<i64>, String), NoSpine> {
        let mut at = self.events.get(&tip).ok_or(NoSpine::TipMissing(tip))?;
        let mut walked: Vec<&Version> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        loop {
            if !seen.insert(at.id) {
                return Err(NoSpine::Cycle);
            }
            walked.push(at);
            match at.prev {
                None => break,
                Some(prev) => at = self.events.get(&prev).ok_or(NoSpine::MissingHop(prev))?,
            }
        }
        if !walked.iter().any(|v| v.genesis) {
            return Err(NoSpine::NoGenesis);
        }
        match order {
            SpineOrder::Causal => walked.reverse(),
            SpineOrder::EventId => walked.sort_by_key(|v| v.id),
        }
        let values: Vec<serde_json::Value> = walked
            .iter()
            .map(|v| serde_json::from_str(&v.text()).unwrap())
            .collect();
        let ids = walked.iter().map(|v| v.id).collect();
        Ok((ids, serde_json::to_string(&values).unwrap()))
    }
}

fn no_spine(why: &Incomplete) -> NoSpine {
    match *why {
        Incomplete::TipMissing(id) => NoSpine::TipMissing(id),
        Incomplete::MissingHop(id) => NoSpine::MissingHop(id),
        Incomplete::NoGenesis => NoSpine::NoGenesis,
        // Which event of the loop a walk names depends on where it entered it.
        Incomplete::Cycle(_) => NoSpine::Cycle,
        ref other => panic!("unexpected {other:?} on a chain shorter than the walk limit"),
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Deliver event `k` (its first version).
    Deliver(usize),
    /// Deliver another version of event `k`: another payload, and `prev` moved to event
    /// `to` (or made a root).
    Redeliver(usize, Option<usize>, u8),
    /// Build the target `k` on the main chain.
    Build(usize),
    /// Clone the main chain, deliver another version of event `k` (prev moved to `to`) to
    /// the clone and build `target` there, through the same caches.
    Fork(usize, Option<usize>, usize),
}

#[derive(Debug, Clone)]
struct Case {
    /// Event `k`'s first version: its id, its prev (an index) and whether it is genesis.
    events: Vec<(i64, Option<usize>, bool)>,
    ops: Vec<Op>,
    by_id: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (2usize..24).prop_flat_map(|n| {
        let ids = Just((1..=(n as i64 * 3)).collect::<Vec<_>>()).prop_shuffle();
        // Where genesis is: the first event, a later one, or nowhere (n).
        let genesis = prop_oneof![3 => Just(0usize), 3 => 1..n, 1 => Just(n)];
        // A few events start a new root part way.
        let roots = proptest::collection::vec(prop::bool::weighted(0.08), n);
        let k = 0..n;
        let to = proptest::option::weighted(0.85, 0..n);
        let op = prop_oneof![
            6 => k.clone().prop_map(Op::Deliver),
            2 => (k.clone(), to.clone(), any::<u8>()).prop_map(|(k, to, m)| Op::Redeliver(k, to, m)),
            6 => k.clone().prop_map(Op::Build),
            2 => (k.clone(), to, k).prop_map(|(k, to, t)| Op::Fork(k, to, t)),
        ];
        let ops = proptest::collection::vec(op, n..n * 6);
        (ids, genesis, roots, ops, any::<bool>()).prop_map(move |(ids, genesis, roots, ops, by_id)| {
            let events = (0..n)
                .map(|i| {
                    let prev = (i > 0 && !roots[i]).then(|| i - 1);
                    (ids[i], prev, i == genesis)
                })
                .collect();
            Case { events, ops, by_id }
        })
    })
}

/// The three caches every target is built through.
#[derive(Default)]
struct Caches {
    today: SpineCache,
    engine: Option<Spine>,
    last: Option<Spine>,
}

fn check_build(
    chain: &Chain,
    reference: &Reference,
    caches: &mut Caches,
    target: i64,
) -> Result<(), TestCaseError> {
    let expected = reference.walk(target, chain.order());
    let check = |path: &str, outcome: &AdvanceOutcome, spine: Option<&Spine>| {
        match (&expected, outcome, spine) {
            (Err(why), AdvanceOutcome::Incomplete(got), _) => {
                prop_assert_eq!(why, &no_spine(got), "{} at {}", path, target);
            }
            (Ok((ids, json)), outcome, Some(spine))
                if !matches!(outcome, AdvanceOutcome::Incomplete(_)) =>
            {
                prop_assert_eq!(&spine.ids(), ids, "{} at {}", path, target);
                let served = String::from_utf8(spine.json_array().to_bytes().to_vec()).unwrap();
                prop_assert_eq!(&served, json, "{} at {}", path, target);
            }
            (expected, outcome, _) => {
                prop_assert!(
                    false,
                    "{path} at {target}: {outcome:?}, the reference {expected:?}"
                );
            }
        }
        Ok(())
    };
    let outcome = caches.today.advance_to(chain, target);
    check("SpineCache", &outcome, caches.today.spine())?;
    let engine = chain_fold::advance(chain, caches.engine.as_ref(), target);
    check("advance", &engine.outcome, engine.spine.as_ref())?;
    if engine.replaces_cache {
        caches.engine = engine.spine;
    }
    let last = chain_fold::advance(chain, caches.last.as_ref(), target);
    check(
        "advance on the last spine",
        &last.outcome,
        last.spine.as_ref(),
    )?;
    if last.spine.is_some() {
        caches.last = last.spine;
    }
    Ok(())
}

fn run(case: &Case) -> Result<(), TestCaseError> {
    let order = if case.by_id {
        SpineOrder::EventId
    } else {
        SpineOrder::Causal
    };
    let first = |k: usize| {
        let (id, prev, genesis) = case.events[k];
        Version {
            id,
            prev: prev.map(|p| case.events[p].0),
            genesis,
            marker: 0,
        }
    };
    let other = |k: usize, to: Option<usize>, marker: u8| Version {
        prev: to.map(|p| case.events[p].0),
        marker,
        ..first(k)
    };
    let mut chain = Chain::new(order);
    let mut reference = Reference::default();
    let mut caches = Caches::default();
    let deliver = |chain: &mut Chain, reference: &mut Reference, version: Version| {
        chain.apply(version.event());
        reference.events.insert(version.id, version);
    };
    for op in &case.ops {
        match *op {
            Op::Deliver(k) => deliver(&mut chain, &mut reference, first(k)),
            Op::Redeliver(k, to, marker) => {
                deliver(&mut chain, &mut reference, other(k, to, marker))
            }
            Op::Build(k) => check_build(&chain, &reference, &mut caches, case.events[k].0)?,
            Op::Fork(k, to, target) => {
                let (mut fork, mut fork_reference) = (chain.clone(), reference.clone());
                deliver(&mut fork, &mut fork_reference, other(k, to, 255));
                check_build(&fork, &fork_reference, &mut caches, case.events[target].0)?;
                // The main chain after a fork's build, through the same caches.
                check_build(&chain, &reference, &mut caches, case.events[target].0)?;
            }
        }
    }
    // Every target once more at the end, every depth below the cached head included.
    for k in 0..case.events.len() {
        check_build(&chain, &reference, &mut caches, case.events[k].0)?;
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("REFERENCE_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn every_build_on_every_path_is_the_reference_walk(case in case()) {
        run(&case)?;
    }
}

/// The chains the production note never shows, by hand: a genesis that is not the root.
#[test]
fn a_genesis_in_the_middle_serves_only_the_tips_above_it() {
    let case = Case {
        events: vec![
            (1, None, false),
            (2, Some(0), false),
            (3, Some(1), true),
            (4, Some(2), false),
        ],
        ops: vec![
            Op::Deliver(0),
            Op::Deliver(1),
            Op::Deliver(2),
            Op::Deliver(3),
            Op::Build(3),
            Op::Build(1),
            Op::Build(2),
            Op::Build(0),
        ],
        by_id: false,
    };
    run(&case).unwrap();
}
