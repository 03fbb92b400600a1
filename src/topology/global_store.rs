//! The loaded global stores of a running application: one in-memory
//! key-value store per global table, filled by whoever runs the topology
//! (see [`super::GlobalKTable`]) and read by the tasks' stream–global-table
//! joins.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::state::{KeyValueStore, StoreError};

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

    /// The entries with keys in `from..=to` (`None`: unbounded), in key
    /// order, read under one lock (for interactive queries).
    pub fn range(
        &self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
    ) -> Result<Vec<crate::state::KeyValue>, StoreError> {
        use std::ops::Bound;
        fn bound(b: Option<&[u8]>) -> Bound<&[u8]> {
            b.map_or(Bound::Unbounded, Bound::Included)
        }
        let store = self.lock();
        store.range(bound(from), bound(to))?.collect()
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
