//! [`MeteredKeyValueStore`]: a key-value store that counts its calls.
//!
//! The runtime wraps every key-value store it opens for a task (outermost,
//! above the record cache, so the counts are the processors' calls). Handles
//! are resolved when the store opens; a call costs one uncontended atomic
//! add. The approximate entry count is refreshed at each commit. Closing the
//! store removes its series. Restoring a store writes through `put`, so
//! `weir_store_puts_total` includes the restored records (also counted in
//! `weir_restore_restored_records_total`). Window and session stores are not
//! metered yet.

use std::ops::Bound;
use std::sync::Arc;

use prometheus::{IntCounter, IntGauge};

use super::Metrics;
use crate::state::{ChangelogRecord, KeyValueStore, KvIter, StateStore, StoreError};

/// A key-value store whose puts, gets and size are exported; see the module docs.
pub struct MeteredKeyValueStore {
    inner: Box<dyn KeyValueStore>,
    metrics: Arc<Metrics>,
    labels: [String; 2],
    puts: IntCounter,
    gets: IntCounter,
    entries: IntGauge,
}

impl MeteredKeyValueStore {
    /// Wraps `inner`, the store of task `task` (its label value, `0_1`).
    pub fn new(inner: Box<dyn KeyValueStore>, metrics: Arc<Metrics>, task: &str) -> Self {
        let labels = [task.to_string(), inner.name().to_string()];
        let l = [labels[0].as_str(), labels[1].as_str()];
        let store = MeteredKeyValueStore {
            puts: metrics.store_puts.with_label_values(&l),
            gets: metrics.store_gets.with_label_values(&l),
            entries: metrics.store_entries.with_label_values(&l),
            inner,
            metrics,
            labels,
        };
        store.refresh_entries();
        store
    }

    fn refresh_entries(&self) {
        if let Ok(n) = self.inner.approximate_num_entries() {
            self.entries.set(n.min(i64::MAX as u64) as i64);
        }
    }
}

impl StateStore for MeteredKeyValueStore {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn commit(&mut self, changelog_offset: Option<i64>) -> Result<(), StoreError> {
        self.inner.commit(changelog_offset)?;
        self.refresh_entries();
        Ok(())
    }

    fn abort(&mut self) {
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
        self.inner.restore_batch(records, changelog_offset)?;
        self.refresh_entries();
        Ok(())
    }

    fn close(&mut self) -> Result<(), StoreError> {
        let l = [self.labels[0].as_str(), self.labels[1].as_str()];
        let _ = self.metrics.store_puts.remove_label_values(&l);
        let _ = self.metrics.store_gets.remove_label_values(&l);
        let _ = self.metrics.store_entries.remove_label_values(&l);
        self.inner.close()
    }
}

impl KeyValueStore for MeteredKeyValueStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.gets.inc();
        self.inner.get(key)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.puts.inc();
        self.inner.put(key, value)
    }

    fn put_if_absent(&mut self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.gets.inc();
        let existing = self.inner.put_if_absent(key, value)?;
        if existing.is_none() {
            self.puts.inc();
        }
        Ok(existing)
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.puts.inc();
        self.inner.delete(key)
    }

    fn range<'a>(&'a self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter<'a>, StoreError> {
        self.inner.range(from, to)
    }

    fn prefix_scan<'a>(&'a self, prefix: &[u8]) -> Result<KvIter<'a>, StoreError> {
        self.inner.prefix_scan(prefix)
    }

    fn all<'a>(&'a self) -> Result<KvIter<'a>, StoreError> {
        self.inner.all()
    }

    fn approximate_num_entries(&self) -> Result<u64, StoreError> {
        self.inner.approximate_num_entries()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::InMemoryKeyValueStore;

    #[test]
    fn counts_calls_and_entries_and_forgets_the_store_on_close() {
        let metrics = Arc::new(Metrics::new("app"));
        let mut store = MeteredKeyValueStore::new(
            Box::new(InMemoryKeyValueStore::new("counts")),
            metrics.clone(),
            "0_2",
        );
        store.put(b"a", b"1").unwrap();
        store.put(b"b", b"2").unwrap();
        assert_eq!(store.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
        store.commit(None).unwrap();
        let l = ["0_2", "counts"];
        assert_eq!(metrics.store_puts.with_label_values(&l).get(), 2);
        assert_eq!(metrics.store_gets.with_label_values(&l).get(), 1);
        assert_eq!(metrics.store_entries.with_label_values(&l).get(), 2);
        store.close().unwrap();
        assert!(!metrics.encode_text().contains("store=\"counts\""));
    }
}
