//! Property tests over random chains: random inversions, gaps, redeliveries and arrival
//! orders.

use chain_fold::fold::{Fold, FoldCache, fold_all};
use chain_fold::{AdvanceOutcome, Chain, Event, SpineCache, SpineOrder};
use proptest::prelude::*;

/// A random execution: a genesis and `n` more events whose ids are a random permutation
/// of a sparse id space (so a later event often has a lower id: inversions), linked in
/// arrival order; then a random arrival order with some redeliveries, and a random subset
/// held back (gaps).
#[derive(Debug, Clone)]
struct Scenario {
    /// Causal order: (id, prev).
    links: Vec<(i64, Option<i64>)>,
    /// Indexes into `links`, in arrival order, redeliveries included.
    arrival: Vec<usize>,
    /// Build targets, as indexes into `links`.
    targets: Vec<usize>,
    /// Payload padding per event, so JSON bodies vary in size.
    pad: Vec<u8>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (1usize..40).prop_flat_map(|n| {
        let ids = Just((1..=(n as i64 * 3)).collect::<Vec<_>>()).prop_shuffle();
        let arrival = proptest::collection::vec(0..n, n..n * 2)
            .prop_map(move |extra| {
                let mut all: Vec<usize> = (0..n).collect();
                all.extend(extra.into_iter().take(n / 3));
                all
            })
            .prop_shuffle();
        let held_back = proptest::collection::vec(any::<bool>(), n);
        let targets = proptest::collection::vec(0..n, 1..12);
        let pad = proptest::collection::vec(0u8..40, n);
        (ids, arrival, held_back, targets, pad).prop_map(
            move |(ids, arrival, held, targets, pad)| {
                let links = (0..n)
                    .map(|i| (ids[i], if i == 0 { None } else { Some(ids[i - 1]) }))
                    .collect();
                // A gap: an event held back arrives only at the very end (or never, if it is
                // in the second half of the hold-back mask).
                let mut arrival: Vec<usize> = arrival.into_iter().filter(|&i| !held[i]).collect();
                arrival.extend((0..n).filter(|&i| held[i] && i % 2 == 0));
                Scenario {
                    links,
                    arrival,
                    targets,
                    pad,
                }
            },
        )
    })
}

fn event(links: &[(i64, Option<i64>)], pad: &[u8], index: usize) -> Event {
    let (id, prev) = links[index];
    let ty = if index == 0 {
        "playbook_started"
    } else {
        "step"
    };
    let payload = serde_json::json!({
        "event_id": id, "execution_id": 1, "prev_event_id": prev, "event_type": ty,
        "pad": "p".repeat(pad[index] as usize),
    });
    Event::from_json(&serde_json::to_vec(&payload).unwrap()).unwrap()
}

struct Ids;
impl Fold for Ids {
    type State = Vec<i64>;
    fn init(&self) -> Vec<i64> {
        Vec::new()
    }
    fn step(&self, s: &mut Vec<i64>, e: &Event) {
        s.push(e.id());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn incremental_equals_cold_rebuild_and_json_and_folds_agree(
        s in scenario(),
        by_id in any::<bool>(),
        builds_every in 1usize..5,
    ) {
        let order = if by_id { SpineOrder::EventId } else { SpineOrder::Causal };
        let mut chain = Chain::new(order);
        let mut cache = SpineCache::default();
        let mut folds = FoldCache::new(Ids);
        for (step, &i) in s.arrival.iter().enumerate() {
            chain.apply(event(&s.links, &s.pad, i));
            if step % builds_every != 0 {
                continue;
            }
            for &t in &s.targets {
                let target = s.links[t].0;
                let outcome = cache.advance_to(&chain, target);
                folds.advance_to(&chain, target);
                let cold = chain.walk_from(target);
                match (&outcome, &cold) {
                    (AdvanceOutcome::Incomplete(why), Err(cold_why)) => prop_assert_eq!(why, cold_why),
                    (AdvanceOutcome::Incomplete(why), Ok(_)) => prop_assert!(false, "incomplete {:?} but cold ok", why),
                    (_, Err(why)) => prop_assert!(false, "{:?} but cold {:?}", outcome, why),
                    (_, Ok(cold)) => {
                        let warm = cache.spine().unwrap();
                        prop_assert_eq!(warm, cold);
                        let fresh: Vec<u8> = {
                            let mut v = b"[".to_vec();
                            for (k, e) in cold.events().enumerate() {
                                if k > 0 { v.push(b','); }
                                v.extend_from_slice(e.payload());
                            }
                            v.push(b']');
                            v
                        };
                        prop_assert_eq!(warm.json_array().to_bytes().to_vec(), fresh);
                        prop_assert_eq!(folds.state().unwrap(), &fold_all(&Ids, cold));
                    }
                }
            }
        }
    }

    #[test]
    fn arrival_order_and_redelivery_do_not_change_the_chain(s in scenario()) {
        let mut shuffled = Chain::new(SpineOrder::Causal);
        for &i in &s.arrival {
            shuffled.apply(event(&s.links, &s.pad, i));
        }
        let mut in_order = Chain::new(SpineOrder::Causal);
        let mut seen: Vec<usize> = s.arrival.clone();
        seen.sort_unstable();
        seen.dedup();
        for &i in &seen {
            in_order.apply(event(&s.links, &s.pad, i));
        }
        prop_assert_eq!(shuffled.len(), in_order.len());
        // The same events in the same id order; what holds them (the ascending log or the
        // late map) depends on the arrival order, and so does the ledger's share for it.
        let events = |c: &Chain| c.iter().cloned().collect::<Vec<_>>();
        prop_assert_eq!(events(&shuffled), events(&in_order));
        let resident = |c: &Chain| c.iter().map(chain_fold::Event::resident_bytes).sum::<usize>();
        prop_assert!(shuffled.bytes() > resident(&shuffled));
        prop_assert_eq!(shuffled.rewrites(), 0);
        for &(id, _) in &s.links {
            prop_assert_eq!(shuffled.walk_from(id), in_order.walk_from(id));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `contains` (whose miss above the largest id never reaches the map) and `max_id`
    /// agree with the events actually indexed, for any ids, extremes and negatives included.
    #[test]
    fn contains_and_max_id_agree_with_the_indexed_events(
        ids in proptest::collection::vec(prop_oneof![any::<i64>(), -5i64..5, Just(i64::MAX), Just(i64::MIN)], 0..30),
        probes in proptest::collection::vec(prop_oneof![any::<i64>(), -6i64..6, Just(i64::MAX), Just(i64::MIN)], 0..30),
    ) {
        let mut chain = Chain::new(SpineOrder::Causal);
        for &id in &ids {
            chain.apply(Event::minimal(id, 1, None, "step"));
        }
        prop_assert_eq!(chain.max_id(), ids.iter().copied().max());
        for probe in probes.iter().chain(&ids) {
            prop_assert_eq!(chain.contains(*probe), ids.contains(probe), "id {}", probe);
            prop_assert_eq!(chain.contains(*probe), chain.get(*probe).is_some());
        }
    }
}

proptest! {
    /// An event's one allocation hands back exactly what it was built from, whatever the
    /// ids (a `prev` far from its id is stored after the payload), the type (one that is
    /// not a short verbatim substring of the payload is stored owned) and the payload.
    #[test]
    fn an_event_hands_back_exactly_its_parts(
        id in any::<i64>(),
        execution in any::<i64>(),
        prev in proptest::option::of(prop_oneof![any::<i64>(), (-5i64..5)]),
        ty in prop_oneof![
            Just(String::from("playbook_started")),
            Just(String::from("playbook.failed")),
            ".{0,20}",
            ".{250,300}",
        ],
        pad in 0usize..70_000,
        ty_in_payload in any::<bool>(),
    ) {
        let prev = prev.map(|p| if (-5..5).contains(&p) { id.wrapping_add(p) } else { p });
        let body = if ty_in_payload {
            format!(
                "{{\"event_id\":{id},\"execution_id\":{execution},\"pad\":\"{}\",\"event_type\":{}}}",
                "x".repeat(pad),
                serde_json::to_string(&ty).unwrap()
            )
        } else {
            format!("{{\"pad\":{pad}}}")
        };
        let event = Event::from_parts(id, execution, prev, &ty, body.as_bytes());
        prop_assert_eq!(event.id(), id);
        prop_assert_eq!(event.execution_id(), execution);
        prop_assert_eq!(event.prev(), prev);
        prop_assert_eq!(event.event_type(), ty.as_str());
        prop_assert_eq!(event.payload(), body.as_bytes());
        prop_assert_eq!(event.is_genesis(), ty == "playbook_started");
        prop_assert_eq!(event.is_terminal(), chain_fold::TERMINAL_TYPES.contains(&ty.as_str()));
        prop_assert!(event.resident_bytes() >= chain_fold::EVENT_OVERHEAD_BYTES + body.len());
        if ty_in_payload {
            // Decoding finds the same type, inline or (escaped, far in) owned.
            let decoded = Event::from_json(body.as_bytes()).unwrap();
            prop_assert_eq!(decoded.event_type(), ty.as_str());
            prop_assert_eq!((decoded.id(), decoded.execution_id()), (id, execution));
            // It keeps the canonical bytes: today's parse and serialization of the body.
            let todays: serde_json::Value = serde_json::from_str(&body).unwrap();
            prop_assert!(decoded.payload() == serde_json::to_vec(&todays).unwrap().as_slice());
        }
    }
}

/// Deliveries for [`missing_links_are_the_named_ids_not_held`]: a linear run from a genesis
/// (each naming the one before; the common case), then random deliveries (any id, any
/// `prev`: late events, holes, identical redeliveries and rewrites).
fn deliveries() -> impl Strategy<Value = Vec<(i64, Option<i64>)>> {
    let random = proptest::collection::vec((1i64..40, proptest::option::of(1i64..40)), 0..12);
    (0i64..25, random).prop_map(|(run, random)| {
        let mut all: Vec<(i64, Option<i64>)> =
            (1..=run).map(|id| (id, (id > 1).then(|| id - 1))).collect();
        all.extend(random);
        all
    })
}

proptest! {
    /// After every delivery, `missing_links` is what its documentation says, computed from
    /// a plain map of what was delivered (the last delivery of an id wins): the ids some
    /// held event names as its `prev` that no held event has, ascending, each once.
    #[test]
    fn missing_links_are_the_named_ids_not_held(deliveries in deliveries()) {
        let mut chain = Chain::new(SpineOrder::Causal);
        let mut held = std::collections::BTreeMap::new();
        for (id, prev) in deliveries {
            let ty = if prev.is_none() { "playbook_started" } else { "step" };
            chain.apply(Event::minimal(id, 1, prev, ty));
            held.insert(id, prev);
            let mut expected: Vec<i64> = held
                .values()
                .filter_map(|&prev| prev.filter(|p| !held.contains_key(p)))
                .collect();
            expected.sort_unstable();
            expected.dedup();
            prop_assert_eq!(chain.missing_links(), expected);
        }
    }
}
