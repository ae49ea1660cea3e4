//! Test-only mutations: each re-introduces one concurrency bug that a model or a check must
//! catch; `scripts/mutations.table` is the catalogue (which model catches which), and the
//! scripts that read it are the only users.
//!
//! Built with the `mutations` feature, the one mutation the `SB_MUTATION` environment
//! variable names is on for the whole process, so one build serves every mutation of a
//! crate. Without the feature, [`on`] is `false` at compile time and every mutated branch
//! is dead code. Both branches of every mutation always compile, so clippy lints the
//! mutated code too.

/// Whether the mutation `name` (as `scripts/mutations.table` spells it) is on: only with
/// the `mutations` feature, and only when `SB_MUTATION` names it.
#[inline]
pub fn on(name: &str) -> bool {
    #[cfg(feature = "mutations")]
    {
        // A plain std cell, not the sync shim's: read-only test configuration, fixed before
        // any model starts; no protocol goes through it.
        static ACTIVE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        ACTIVE
            .get_or_init(|| std::env::var("SB_MUTATION").ok())
            .as_deref()
            == Some(name)
    }
    #[cfg(not(feature = "mutations"))]
    {
        let _ = name;
        false
    }
}
