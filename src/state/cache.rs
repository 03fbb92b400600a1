//! The record cache's memory budget.
//!
//! The record cache collapses repeated updates of a key within a commit
//! interval, so fewer records go downstream and to the changelog. The DSL's
//! aggregations hold those updates in their processor nodes
//! (`crate::processor::aggregate`, `UpdateCache`), typed and unserialized;
//! this module holds what every node shares: the instance's
//! [`CacheBudget`] (`cache_max_bytes`) and the per-entry overhead a node
//! charges to it.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes counted per cache entry on top of its key and value.
pub const ENTRY_OVERHEAD_BYTES: u64 = 64;

/// The record-cache memory of one application instance
/// (`cache_max_bytes`), shared by every caching node of every task.
///
/// A node charges each entry it starts holding and releases what it
/// flushes; a charge that takes the total past the maximum tells the node to
/// flush (Kafka Streams evicts from its per-thread cache the same way). With
/// a maximum of 0 nothing is held: every update goes downstream at once.
#[derive(Debug, Default)]
pub struct CacheBudget {
    max_bytes: u64,
    used: AtomicU64,
}

impl CacheBudget {
    /// A budget of `max_bytes` (0 disables caching).
    pub fn new(max_bytes: u64) -> Self {
        CacheBudget {
            max_bytes,
            used: AtomicU64::new(0),
        }
    }

    /// Whether caching is on.
    pub fn enabled(&self) -> bool {
        self.max_bytes > 0
    }

    /// The maximum in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Bytes held now, over all nodes.
    pub fn used_bytes(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Charges `bytes`; returns whether the total is now over the maximum.
    pub fn charge(&self, bytes: u64) -> bool {
        self.used.fetch_add(bytes, Ordering::Relaxed) + bytes > self.max_bytes
    }

    /// Whether the total is over the maximum now.
    pub fn over(&self) -> bool {
        self.used_bytes() > self.max_bytes
    }

    /// Releases `bytes` charged before.
    pub fn release(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_past_the_maximum_asks_for_a_flush() {
        let budget = CacheBudget::new(100);
        assert!(!budget.charge(60));
        assert!(budget.charge(60), "120 bytes are over a budget of 100");
        budget.release(60);
        assert_eq!(budget.used_bytes(), 60);
        assert!(!budget.charge(40), "exactly the maximum is not over it");
    }

    #[test]
    fn a_zero_budget_is_disabled() {
        let budget = CacheBudget::new(0);
        assert!(!budget.enabled());
        assert!(budget.charge(1));
    }
}
