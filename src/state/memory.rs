//! The in-memory backend: committed data in ordered maps on the heap.
//!
//! [`MemoryBackend`] keeps one `BTreeMap` per segment. It is not durable:
//! after a restart an in-memory store is empty and reports no committed
//! offset, so the runtime restores it from the start of its changelog. It
//! offers the same commit/abort invariant as the RocksDB backend (see the
//! [module docs](super)): open writes live in the store's overlay until
//! `commit` applies them, and `abort` drops them.
//!
//! ```
//! use weir::state::{InMemoryKeyValueStore, KeyValueStore, StateStore};
//!
//! let mut store = InMemoryKeyValueStore::new("counts");
//! store.put(b"a", b"1").unwrap();
//! store.commit(Some(0)).unwrap();
//! store.put(b"b", b"2").unwrap();
//! store.abort(); // the write of "b" is discarded
//! assert_eq!(store.get(b"a").unwrap(), Some(b"1".to_vec()));
//! assert_eq!(store.get(b"b").unwrap(), None);
//! assert_eq!(store.committed_offset(), Some(0));
//! ```

use std::collections::BTreeMap;
use std::ops::Bound;

use super::backend::{Backend, Core, Meta, Write, empty_bounds};
use super::{KvIter, KvStore, StoreError};

/// Committed data of one in-memory store.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    segments: BTreeMap<i64, BTreeMap<Vec<u8>, Vec<u8>>>,
    meta: Meta,
    entries: u64,
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Backend for MemoryBackend {
    fn get(&self, segment: i64, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .segments
            .get(&segment)
            .and_then(|s| s.get(key))
            .cloned())
    }

    fn range<'a>(
        &'a self,
        segment: i64,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
    ) -> Result<KvIter<'a>, StoreError> {
        match self.segments.get(&segment) {
            Some(map) if !empty_bounds(from, to) => Ok(Box::new(
                map.range::<[u8], _>((from, to))
                    .map(|(k, v)| Ok((k.clone(), v.clone()))),
            )),
            _ => Ok(Box::new(std::iter::empty())),
        }
    }

    fn segments(&self) -> Vec<i64> {
        self.segments.keys().copied().collect()
    }

    fn meta(&self) -> Meta {
        self.meta
    }

    fn apply(
        &mut self,
        writes: &mut dyn Iterator<Item = Write<'_>>,
        meta: Meta,
        _durable: bool,
    ) -> Result<(), StoreError> {
        for (segment, key, value) in writes {
            let map = self.segments.entry(segment).or_default();
            match value {
                Some(v) => {
                    if map.insert(key.to_vec(), v.to_vec()).is_none() {
                        self.entries += 1;
                    }
                }
                None => {
                    if map.remove(key).is_some() {
                        self.entries -= 1;
                    }
                }
            }
        }
        let live = self.segments.split_off(&meta.min_live_segment);
        let expired = std::mem::replace(&mut self.segments, live);
        self.entries -= expired.values().map(|m| m.len() as u64).sum::<u64>();
        self.segments.retain(|_, m| !m.is_empty());
        self.meta = meta;
        Ok(())
    }

    fn approximate_num_entries(&self) -> Result<u64, StoreError> {
        Ok(self.entries)
    }
}

/// A key-value store held in memory. See [`KvStore`] for the API.
pub type InMemoryKeyValueStore = KvStore<MemoryBackend>;

impl KvStore<MemoryBackend> {
    /// An empty in-memory key-value store named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        KvStore::with_backend(Core::new(name.into(), MemoryBackend::new()))
    }
}
