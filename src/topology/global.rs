//! [`GlobalKTable`]: a table every instance holds in full, and the
//! [`GlobalStores`](super::GlobalStores) that hold it while an application runs.
//!
//! A global table is not part of any sub-topology and has no tasks: it is a
//! (source topic, store) pair. Whoever runs the topology loads it:
//!
//! * the runtime's global thread (`src/runtime/global.rs`) reads *all*
//!   partitions of the topic from the beginning before any stream thread
//!   starts, then keeps applying new records while the application runs;
//! * the [`crate::driver::TopologyTestDriver`] applies records piped into
//!   the topic at once.
//!
//! Invariants: the store holds exactly the topic's bytes (key → latest
//! value; a null value deletes), so the topic is its changelog and nothing
//! is logged; the source's timestamp extractor is not used (global tables do
//! not advance stream time); tasks only read the store, through
//! [`GlobalStores`](super::GlobalStores) handed to them in [`crate::processor::TaskConfig`].

use crate::serdes::SharedSerde;

use super::graph::GlobalDef;
use super::{Consumed, Data, Materialized, StreamsBuilder};

/// A fully replicated table (Kafka Streams' `GlobalKTable<K, V>`), for
/// stream–global-table joins ([`super::KStream::join_global`]).
pub struct GlobalKTable<K, V> {
    pub(crate) store: String,
    pub(crate) key_serde: SharedSerde<K>,
    pub(crate) value_serde: SharedSerde<V>,
}

impl<K, V> Clone for GlobalKTable<K, V> {
    fn clone(&self) -> Self {
        GlobalKTable {
            store: self.store.clone(),
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone(),
        }
    }
}

impl<K, V> GlobalKTable<K, V> {
    /// The name of the store holding the table.
    pub fn store_name(&self) -> &str {
        &self.store
    }
}

impl StreamsBuilder {
    /// A global table of the latest value per key of *every* partition of
    /// `topic` (null values delete); see the module docs.
    ///
    /// ```
    /// use weir::topology::{Consumed, Materialized, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let products = builder.global_table::<String, String>(
    ///     "products", Consumed::new(), Materialized::as_("products-store"));
    /// assert_eq!(products.store_name(), "products-store");
    /// ```
    pub fn global_table<K: Data, V: Data>(
        &self,
        topic: &str,
        consumed: Consumed<K, V>,
        materialized: Materialized<K, V>,
    ) -> GlobalKTable<K, V> {
        let mut b = self.inner.borrow_mut();
        let store = b.name_or(materialized.store_name, &format!("{topic}-STATE-STORE-"));
        let key_serde = b.serde(
            consumed.key_serde.or(materialized.key_serde),
            None,
            &store,
            "key",
        );
        let value_serde = b.serde(
            consumed.value_serde.or(materialized.value_serde),
            None,
            &store,
            "value",
        );
        b.add_global(GlobalDef {
            store: store.clone(),
            topic: topic.to_owned(),
        });
        GlobalKTable {
            store,
            key_serde,
            value_serde,
        }
    }
}
