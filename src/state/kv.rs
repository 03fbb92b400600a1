//! Key-value stores over either backend.
//!
//! [`KvStore`] implements [`KeyValueStore`] on top of a
//! [`Backend`](super::backend::Backend), using segment 0 of it. The open
//! writes of the current commit interval live in an in-memory overlay until
//! [`StateStore::commit`]; see the [module docs](super) for the invariant.
//! Iterators merge the overlay and the backend lazily; they never copy the
//! range into memory.

use std::ops::Bound;

use super::backend::{Backend, Core, kv_writes, prefix_successor};
use super::{ChangelogRecord, KeyValueStore, KvIter, StateStore, StoreError};

/// A key-value store. Use the aliases
/// [`InMemoryKeyValueStore`](super::InMemoryKeyValueStore) and
/// [`RocksDbKeyValueStore`](super::RocksDbKeyValueStore).
pub struct KvStore<B> {
    core: Core<B>,
}

impl<B: Backend> KvStore<B> {
    pub(crate) fn with_backend(core: Core<B>) -> Self {
        KvStore { core }
    }

    /// The backend holding the committed data.
    pub fn backend(&self) -> &B {
        &self.core.backend
    }

    /// Number of writes (puts and deletes) buffered since the last commit.
    pub fn open_write_count(&self) -> usize {
        self.core.open_write_count()
    }
}

impl<B: Backend> StateStore for KvStore<B> {
    fn name(&self) -> &str {
        &self.core.name
    }

    fn commit(&mut self, changelog_offset: Option<i64>) -> Result<(), StoreError> {
        self.core.commit(changelog_offset)
    }

    fn abort(&mut self) {
        self.core.abort()
    }

    fn committed_offset(&self) -> Option<i64> {
        self.core.committed_offset()
    }

    fn restore_batch(
        &mut self,
        records: &[ChangelogRecord<'_>],
        changelog_offset: i64,
    ) -> Result<(), StoreError> {
        self.core.restore(&mut kv_writes(records), changelog_offset)
    }

    fn close(&mut self) -> Result<(), StoreError> {
        self.core.close()
    }
}

impl<B: Backend> KeyValueStore for KvStore<B> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.core.get(0, key)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.core.put(0, key, Some(value));
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let old = self.core.get(0, key)?;
        if old.is_some() {
            self.core.put(0, key, None);
        }
        Ok(old)
    }

    fn range<'a>(&'a self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter<'a>, StoreError> {
        self.core.range(0, from, to)
    }

    fn prefix_scan<'a>(&'a self, prefix: &[u8]) -> Result<KvIter<'a>, StoreError> {
        match prefix_successor(prefix) {
            Some(end) => {
                self.core
                    .range(0, Bound::Included(prefix), Bound::Excluded(end.as_slice()))
            }
            None => self
                .core
                .range(0, Bound::Included(prefix), Bound::Unbounded),
        }
    }

    fn approximate_num_entries(&self) -> Result<u64, StoreError> {
        let buffered = self.core.open_write_count() + self.core.pending_write_count();
        Ok(self.core.backend.approximate_num_entries()? + buffered as u64)
    }
}
