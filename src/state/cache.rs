//! The record cache: collapses repeated updates of a key within a commit
//! interval, so fewer records go downstream and to the changelog.
//!
//! [`RecordCache`] is a size-bounded map of key to latest value (or
//! tombstone), each entry *dirty* (not yet written to the store) or *clean*
//! (equal to what the store holds). When its size passes `max_bytes`, the
//! least recently written entries are evicted; evicted dirty entries are
//! returned to the caller, who must write, forward and log them. At commit
//! [`RecordCache::flush`] returns every dirty entry, in key order. A
//! `max_bytes` of 0 disables caching: every write comes straight back as
//! evicted.
//!
//! [`CachingKeyValueStore`] puts a cache in front of a [`KeyValueStore`], for
//! code that drives stores itself. (The DSL's aggregations do not use it:
//! they hold updates in their processor nodes, charged to a
//! [`CacheBudget`], see `crate::processor::aggregate`.) Its protocol, per
//! commit interval:
//!
//! 1. processors write through it; after each write the caller may drain
//!    [`CachingKeyValueStore::take_evicted`] and forward/log those entries;
//! 2. at commit the caller calls [`CachingKeyValueStore::flush`], forwards
//!    and logs the returned entries, commits the Kafka transaction, then
//!    calls [`StateStore::commit`] with the last changelog offset;
//! 3. on abort [`StateStore::abort`] empties the cache and the store's open
//!    writes together.
//!
//! Invariant: the cache never holds anything the store (committed state plus
//! open writes) would contradict after a flush; reads merge the cache over
//! the store, so they always see the latest write.
//!
//! Size accounting: key bytes + value bytes + [`ENTRY_OVERHEAD_BYTES`] per
//! entry.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

use super::backend::{MergeIter, empty_bounds, prefix_successor};
use super::{ChangelogRecord, KeyValueStore, KvIter, StateStore, StoreError};

/// Bytes counted per cache entry on top of its key and value.
pub const ENTRY_OVERHEAD_BYTES: u64 = 64;

/// An update the cache hands back for the caller to forward and log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirtyEntry {
    /// The key.
    pub key: Vec<u8>,
    /// The latest value; `None` is a delete.
    pub value: Option<Vec<u8>>,
}

#[derive(Debug)]
struct Entry {
    value: Option<Vec<u8>>,
    dirty: bool,
    seq: u64,
}

/// A size-bounded write cache. See the module docs.
#[derive(Debug, Default)]
pub struct RecordCache {
    max_bytes: u64,
    bytes: u64,
    entries: BTreeMap<Vec<u8>, Entry>,
    /// Write order: sequence number to key, oldest first.
    order: BTreeMap<u64, Vec<u8>>,
    next_seq: u64,
    dirty: usize,
}

fn entry_bytes(key: &[u8], value: &Option<Vec<u8>>) -> u64 {
    key.len() as u64 + value.as_ref().map_or(0, |v| v.len() as u64) + ENTRY_OVERHEAD_BYTES
}

impl RecordCache {
    /// A cache holding up to `max_bytes`; 0 disables it.
    pub fn new(max_bytes: u64) -> Self {
        RecordCache {
            max_bytes,
            ..Default::default()
        }
    }

    /// Bytes currently accounted.
    pub fn size_bytes(&self) -> u64 {
        self.bytes
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Number of dirty entries (written but not yet flushed).
    pub fn dirty_len(&self) -> usize {
        self.dirty
    }

    /// True when the cache holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The cached value of `key`: `Some(None)` for a cached delete, `None`
    /// on a miss.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.entries.get(key).map(|e| e.value.as_deref())
    }

    /// Records a write of `key`. Returns the dirty entries evicted to make
    /// room, oldest first (with a disabled cache: this write itself).
    pub fn put(&mut self, key: &[u8], value: Option<Vec<u8>>) -> Vec<DirtyEntry> {
        if self.max_bytes == 0 {
            return vec![DirtyEntry {
                key: key.to_vec(),
                value,
            }];
        }
        self.remove(key);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.bytes += entry_bytes(key, &value);
        self.dirty += 1;
        self.order.insert(seq, key.to_vec());
        self.entries.insert(
            key.to_vec(),
            Entry {
                value,
                dirty: true,
                seq,
            },
        );
        let mut evicted = Vec::new();
        while self.bytes > self.max_bytes {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            let e = self
                .entries
                .remove(&oldest)
                .expect("order and entries agree");
            self.bytes -= entry_bytes(&oldest, &e.value);
            if e.dirty {
                self.dirty -= 1;
                evicted.push(DirtyEntry {
                    key: oldest,
                    value: e.value,
                });
            }
        }
        evicted
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(e) = self.entries.remove(key) {
            self.order.remove(&e.seq);
            self.bytes -= entry_bytes(key, &e.value);
            self.dirty -= usize::from(e.dirty);
        }
    }

    /// Returns all dirty entries in key order and marks them clean.
    pub fn flush(&mut self) -> Vec<DirtyEntry> {
        self.dirty = 0;
        self.entries
            .iter_mut()
            .filter(|(_, e)| e.dirty)
            .map(|(k, e)| {
                e.dirty = false;
                DirtyEntry {
                    key: k.clone(),
                    value: e.value.clone(),
                }
            })
            .collect()
    }

    /// Drops every entry, dirty or not (used on abort).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.order.clear();
        self.bytes = 0;
        self.dirty = 0;
    }

    fn range<'a>(
        &'a self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
    ) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + use<'a> {
        let range = if empty_bounds(from, to) {
            None
        } else {
            Some(self.entries.range::<[u8], _>((from, to)))
        };
        range
            .into_iter()
            .flatten()
            .map(|(k, e)| (k.as_slice(), e.value.as_deref()))
    }
}

/// A [`KeyValueStore`] with a [`RecordCache`] in front. See the module docs
/// for the protocol.
pub struct CachingKeyValueStore<S> {
    inner: S,
    cache: RecordCache,
    evicted: Vec<DirtyEntry>,
}

impl<S: KeyValueStore> CachingKeyValueStore<S> {
    /// Wraps `inner` with a cache of `cache_max_bytes` (0 disables it).
    pub fn new(inner: S, cache_max_bytes: u64) -> Self {
        CachingKeyValueStore {
            inner,
            cache: RecordCache::new(cache_max_bytes),
            evicted: Vec::new(),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The cache.
    pub fn cache(&self) -> &RecordCache {
        &self.cache
    }

    /// Dirty entries evicted since the last call (already written to the
    /// wrapped store's open writes), oldest first. Forward and log them.
    pub fn take_evicted(&mut self) -> Vec<DirtyEntry> {
        std::mem::take(&mut self.evicted)
    }

    /// Writes every dirty entry to the wrapped store and returns, in order,
    /// the evicted entries not yet taken and then the flushed ones (in key
    /// order). Forward and log them before committing.
    pub fn flush(&mut self) -> Result<Vec<DirtyEntry>, StoreError> {
        let flushed = self.cache.flush();
        write_all(&mut self.inner, &flushed)?;
        let mut out = std::mem::take(&mut self.evicted);
        out.extend(flushed);
        Ok(out)
    }

    fn record(&mut self, key: &[u8], value: Option<Vec<u8>>) -> Result<(), StoreError> {
        let evicted = self.cache.put(key, value);
        write_all(&mut self.inner, &evicted)?;
        self.evicted.extend(evicted);
        Ok(())
    }
}

fn write_all<S: KeyValueStore>(store: &mut S, entries: &[DirtyEntry]) -> Result<(), StoreError> {
    for e in entries {
        match &e.value {
            Some(v) => store.put(&e.key, v)?,
            None => {
                store.delete(&e.key)?;
            }
        }
    }
    Ok(())
}

impl<S: KeyValueStore> StateStore for CachingKeyValueStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// Commits the wrapped store. Dirty entries still in the cache are
    /// written to the store first so no update is lost, but they are then
    /// neither forwarded nor logged: call [`CachingKeyValueStore::flush`]
    /// before committing the transaction.
    fn commit(&mut self, changelog_offset: Option<i64>) -> Result<(), StoreError> {
        let pending = self.cache.flush();
        write_all(&mut self.inner, &pending)?;
        self.evicted.clear();
        self.inner.commit(changelog_offset)
    }

    fn abort(&mut self) {
        self.cache.clear();
        self.evicted.clear();
        self.inner.abort();
    }

    fn committed_offset(&self) -> Option<i64> {
        self.inner.committed_offset()
    }

    fn restore_batch(
        &mut self,
        records: &[ChangelogRecord<'_>],
        changelog_offset: i64,
    ) -> Result<(), StoreError> {
        if self.cache.dirty_len() > 0 {
            return Err(StoreError::InvalidState {
                store: self.inner.name().to_string(),
                message: "restore_batch called while the record cache holds unflushed writes; \
                          commit or abort them before restoring"
                    .into(),
            });
        }
        self.inner.restore_batch(records, changelog_offset)?;
        self.cache.clear();
        Ok(())
    }

    fn close(&mut self) -> Result<(), StoreError> {
        self.cache.clear();
        self.evicted.clear();
        self.inner.close()
    }
}

impl<S: KeyValueStore> KeyValueStore for CachingKeyValueStore<S> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.cache.get(key) {
            Some(v) => Ok(v.map(<[u8]>::to_vec)),
            None => self.inner.get(key),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.record(key, Some(value.to_vec()))
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let old = self.get(key)?;
        if old.is_some() {
            self.record(key, None)?;
        }
        Ok(old)
    }

    fn range<'a>(&'a self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter<'a>, StoreError> {
        let committed = self.inner.range(from, to)?;
        let open = Box::new(self.cache.range(from, to));
        Ok(Box::new(MergeIter::new(committed, open)))
    }

    fn prefix_scan<'a>(&'a self, prefix: &[u8]) -> Result<KvIter<'a>, StoreError> {
        match prefix_successor(prefix) {
            Some(end) => self.range(Bound::Included(prefix), Bound::Excluded(end.as_slice())),
            None => self.range(Bound::Included(prefix), Bound::Unbounded),
        }
    }

    fn approximate_num_entries(&self) -> Result<u64, StoreError> {
        Ok(self.inner.approximate_num_entries()? + self.cache.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::InMemoryKeyValueStore;

    #[test]
    fn repeated_updates_collapse_to_one_dirty_entry() {
        let mut cache = RecordCache::new(1 << 20);
        for i in 0..100u32 {
            assert!(cache.put(b"k", Some(i.to_be_bytes().to_vec())).is_empty());
        }
        let flushed = cache.flush();
        assert_eq!(
            flushed,
            vec![DirtyEntry {
                key: b"k".to_vec(),
                value: Some(99u32.to_be_bytes().to_vec())
            }]
        );
        assert!(cache.flush().is_empty(), "flushed entries are clean");
    }

    #[test]
    fn eviction_returns_oldest_dirty_entries() {
        // Each entry: 1 key byte + 1 value byte + overhead.
        let per = 2 + ENTRY_OVERHEAD_BYTES;
        let mut cache = RecordCache::new(per * 2);
        assert!(cache.put(b"a", Some(b"1".to_vec())).is_empty());
        assert!(cache.put(b"b", Some(b"2".to_vec())).is_empty());
        let evicted = cache.put(b"c", Some(b"3".to_vec()));
        assert_eq!(evicted.len(), 1);
        assert_eq!(evicted[0].key, b"a");
        assert_eq!(cache.size_bytes(), per * 2);
    }

    #[test]
    fn zero_size_disables_the_cache() {
        let mut cache = RecordCache::new(0);
        assert_eq!(cache.put(b"a", None).len(), 1);
        assert!(cache.is_empty());
    }

    #[test]
    fn caching_store_reads_merge_and_abort_discards() {
        let mut store = CachingKeyValueStore::new(InMemoryKeyValueStore::new("s"), 1 << 20);
        store.put(b"a", b"1").unwrap();
        store.commit(Some(1)).unwrap();
        store.put(b"b", b"2").unwrap();
        store.delete(b"a").unwrap();
        let all: Vec<_> = store.all().unwrap().map(Result::unwrap).collect();
        assert_eq!(all, vec![(b"b".to_vec(), b"2".to_vec())]);
        let out = store.flush().unwrap();
        assert_eq!(out.len(), 2);
        store.abort();
        assert_eq!(store.get(b"a").unwrap(), Some(b"1".to_vec()));
        assert_eq!(store.get(b"b").unwrap(), None);
    }
}

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

    /// Releases `bytes` charged before.
    pub fn release(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}
