//! [`GlobalKTable`]: a table every instance holds in full, and the
//! [`GlobalStores`] that hold it while an application runs.
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
//! [`GlobalStores`] handed to them in [`crate::processor::TaskConfig`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::serdes::SharedSerde;
use crate::state::{KeyValueStore, StoreError};

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

/// A global table of a topology: its store and source topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GlobalDef {
    pub(crate) store: String,
    pub(crate) topic: String,
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

/// One loaded global store. Readers and the loader share it; every call
/// holds its lock for one operation only.
pub struct GlobalStore {
    name: String,
    topic: String,
    store: Mutex<Box<dyn KeyValueStore>>,
}

impl GlobalStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Box<dyn KeyValueStore>> {
        // A panic while holding the lock cannot leave a half-applied record:
        // each operation is one store call.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The topic the store is loaded from.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The value bytes of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.lock().get(key)
    }

    /// Applies one record of the source topic: `None` deletes.
    pub fn apply(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        let mut store = self.lock();
        match value {
            Some(v) => store.put(key, v),
            None => store.delete(key).map(|_| ()),
        }
    }

    /// Makes the applied records durable in the backend (no changelog:
    /// the source topic is one).
    pub fn flush(&self) -> Result<(), StoreError> {
        self.lock().commit(None)
    }

    /// The number of entries (an estimate for persistent backends).
    pub fn approximate_num_entries(&self) -> Result<u64, StoreError> {
        self.lock().approximate_num_entries()
    }
}

/// The loaded global stores of one running application, by store name.
/// Cheap to clone; empty when the topology has no global table.
#[derive(Clone, Default)]
pub struct GlobalStores {
    stores: Arc<HashMap<String, Arc<GlobalStore>>>,
}

impl GlobalStores {
    /// Stores for `defs` (`(store, topic)`), each opened by `open(store)`.
    pub fn open(
        defs: &[(String, String)],
        mut open: impl FnMut(&str) -> Result<Box<dyn KeyValueStore>, StoreError>,
    ) -> Result<Self, StoreError> {
        let mut stores = HashMap::new();
        for (name, topic) in defs {
            let store = GlobalStore {
                name: name.clone(),
                topic: topic.clone(),
                store: Mutex::new(open(name)?),
            };
            stores.insert(name.clone(), Arc::new(store));
        }
        Ok(GlobalStores {
            stores: Arc::new(stores),
        })
    }

    /// The store named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<GlobalStore>> {
        self.stores.get(name)
    }

    /// The store loaded from `topic`.
    pub fn by_topic(&self, topic: &str) -> Option<&Arc<GlobalStore>> {
        self.stores.values().find(|s| s.topic == topic)
    }

    /// All stores, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<GlobalStore>> {
        self.stores.values()
    }
}

impl std::fmt::Debug for GlobalStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&str> = self.stores.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("GlobalStores")
            .field("stores", &names)
            .finish()
    }
}
