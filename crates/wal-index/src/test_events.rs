//! The events the crate's own tests and models build chains from.

use chain_fold::Event;

/// Event `id` of `execution`, linking to `prev`: the genesis when it links to nothing, a
/// step otherwise.
pub(crate) fn ev(execution: i64, id: i64, prev: Option<i64>) -> Event {
    let ty = if prev.is_none() {
        "playbook_started"
    } else {
        "step"
    };
    Event::minimal(id, execution, prev, ty)
}
