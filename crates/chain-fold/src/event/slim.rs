//! The slim projection of an event already decoded whole ([`Event::to_slim`]); a drain
//! that stores slim events decodes straight to it instead ([`Event::from_json_slim`]).

use std::fmt;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Event, EventType, SLIM, SLIM_KEYS};

impl Event {
    /// This event with its payload reduced to the slim projection ([`SLIM_KEYS`]).
    ///
    /// The decoded fields are unchanged (the chain link survives even though
    /// `prev_event_id` is not a slim key). Key order of the kept keys is preserved.
    ///
    /// Projecting a projection is free: the result remembers that it is slim, and its own
    /// `to_slim` is a reference-count increment (so a drain may project events on its
    /// decode threads and the index's projection on apply costs nothing).
    ///
    /// ```
    /// let e = chain_fold::Event::from_json(br#"{"event_id":1,"execution_id":2,"result":{"big":1},"extra":3}"#).unwrap();
    /// let slim = e.to_slim();
    /// let again = slim.to_slim();
    /// assert_eq!(again, slim);
    /// assert!(again.ptr_eq(&slim), "no second projection");
    /// ```
    pub fn to_slim(&self) -> Event {
        if self.header().flags & SLIM != 0 {
            return self.clone();
        }
        let Some(kept) = slim_payload(self.payload()) else {
            return self.clone();
        };
        let event_type = EventType::located(&kept, self.event_type());
        // `None` only past 4 GiB, which the projection (no longer than this event's payload,
        // which fit) could pass only by a type it must now own; the event is then kept
        // whole, as for a payload that does not project.
        Self::assemble(
            self.id(),
            self.execution_id(),
            self.prev(),
            event_type,
            std::iter::once(&kept[..]),
            SLIM,
        )
        .unwrap_or_else(|_| self.clone())
    }
}

fn slim_payload(payload: &[u8]) -> Option<Bytes> {
    // A Vec of pairs (not a map) keeps the producer's key order and tolerates nothing odd:
    // the payload already decoded once, so failure here means "keep it whole".
    // Keys as `Text` (borrowed unless escaped): a key that needs an escape is still a key.
    struct Pairs<'a>(Vec<(crate::canonical::Text<'a>, &'a RawValue)>);
    impl<'de: 'a, 'a> Deserialize<'de> for Pairs<'a> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<'a>(std::marker::PhantomData<&'a ()>);
            impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
                type Value = Pairs<'a>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<M: serde::de::MapAccess<'de>>(
                    self,
                    mut m: M,
                ) -> Result<Self::Value, M::Error> {
                    let mut out = Vec::new();
                    while let Some((k, v)) =
                        m.next_entry::<crate::canonical::Text<'de>, &'de RawValue>()?
                    {
                        out.push((k, v));
                    }
                    Ok(Pairs(out))
                }
            }
            d.deserialize_map(V(std::marker::PhantomData))
        }
    }
    let pairs: Pairs<'_> = serde_json::from_slice(payload).ok()?;
    let mut out = Vec::with_capacity(payload.len().min(4096));
    out.push(b'{');
    for (key, value) in pairs
        .0
        .iter()
        .filter(|(k, _)| SLIM_KEYS.contains(&k.0.as_ref()))
    {
        if out.len() > 1 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, key.0.as_ref()).ok()?;
        out.push(b':');
        out.extend_from_slice(value.get().as_bytes());
    }
    out.push(b'}');
    Some(Bytes::from(out))
}
