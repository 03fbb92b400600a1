//! Metered stores: [`MeteredKeyValueStore`], [`MeteredWindowStore`] and
//! [`MeteredSessionStore`] count their calls.
//!
//! The runtime wraps every store it opens for a task (outermost, above the
//! record cache, so the counts are the processors' calls). Handles are
//! resolved when the store opens; a call costs one uncontended atomic add.
//! Writes (`put`, `delete`, `remove`) count as puts; point reads, range
//! fetches and session lookups count as gets (one per call, not per entry
//! returned). The approximate entry count (`weir_store_entries`) exists for
//! key-value stores only and is refreshed at each commit. Closing a store
//! removes its series. Every restored record counts as a put (restoring
//! writes batches through `restore_batch`), so `weir_store_puts_total`
//! includes the restored records (also counted in
//! `weir_restore_restored_records_total`).

use std::ops::Bound;
use std::sync::Arc;

use prometheus::{IntCounter, IntGauge};

use super::Metrics;
use crate::state::{
    ChangelogRecord, KeyValueStore, KvIter, SessionIter, SessionKey, SessionStore, StateStore,
    StoreError, WindowIter, WindowStore,
};

/// The handles of one store.
struct StoreMeter {
    metrics: Arc<Metrics>,
    labels: [String; 2],
    puts: IntCounter,
    gets: IntCounter,
}

impl StoreMeter {
    fn new(metrics: Arc<Metrics>, task: &str, store: &str) -> Self {
        let labels = [task.to_string(), store.to_string()];
        let l = [labels[0].as_str(), labels[1].as_str()];
        StoreMeter {
            puts: metrics.store_puts.with_label_values(&l),
            gets: metrics.store_gets.with_label_values(&l),
            metrics,
            labels,
        }
    }

    fn remove(&self) {
        let l = [self.labels[0].as_str(), self.labels[1].as_str()];
        let _ = self.metrics.store_puts.remove_label_values(&l);
        let _ = self.metrics.store_gets.remove_label_values(&l);
        let _ = self.metrics.store_entries.remove_label_values(&l);
    }
}

/// The [`StateStore`] methods every metered store forwards to `inner`.
macro_rules! forward_state_store {
    () => {
        fn name(&self) -> &str {
            self.inner.name()
        }

        fn commit(&mut self, changelog_offset: Option<i64>) -> Result<(), StoreError> {
            self.inner.commit(changelog_offset)
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
            self.meter.puts.inc_by(records.len() as u64);
            Ok(())
        }

        fn close(&mut self) -> Result<(), StoreError> {
            self.meter.remove();
            self.inner.close()
        }
    };
}

/// A window store whose puts and gets are exported; see the module docs.
pub struct MeteredWindowStore {
    inner: Box<dyn WindowStore>,
    meter: StoreMeter,
}

impl MeteredWindowStore {
    /// Wraps `inner`, the store of task `task` (its label value, `0_1`).
    pub fn new(inner: Box<dyn WindowStore>, metrics: Arc<Metrics>, task: &str) -> Self {
        let meter = StoreMeter::new(metrics, task, inner.name());
        MeteredWindowStore { inner, meter }
    }
}

impl StateStore for MeteredWindowStore {
    forward_state_store!();
}

impl WindowStore for MeteredWindowStore {
    fn put(
        &mut self,
        key: &[u8],
        window_start_ms: i64,
        value: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        self.meter.puts.inc();
        self.inner.put(key, window_start_ms, value)
    }

    fn fetch(&self, key: &[u8], window_start_ms: i64) -> Result<Option<Vec<u8>>, StoreError> {
        self.meter.gets.inc();
        self.inner.fetch(key, window_start_ms)
    }

    fn fetch_range<'a>(
        &'a self,
        key: &[u8],
        from_ms: i64,
        to_ms: i64,
    ) -> Result<WindowIter<'a>, StoreError> {
        self.meter.gets.inc();
        self.inner.fetch_range(key, from_ms, to_ms)
    }

    fn fetch_all<'a>(&'a self, from_ms: i64, to_ms: i64) -> Result<WindowIter<'a>, StoreError> {
        self.meter.gets.inc();
        self.inner.fetch_all(from_ms, to_ms)
    }

    fn expire(&mut self, stream_time_ms: i64) -> Result<(), StoreError> {
        self.inner.expire(stream_time_ms)
    }
}

/// A session store whose puts and gets are exported; see the module docs.
pub struct MeteredSessionStore {
    inner: Box<dyn SessionStore>,
    meter: StoreMeter,
}

impl MeteredSessionStore {
    /// Wraps `inner`, the store of task `task` (its label value, `0_1`).
    pub fn new(inner: Box<dyn SessionStore>, metrics: Arc<Metrics>, task: &str) -> Self {
        let meter = StoreMeter::new(metrics, task, inner.name());
        MeteredSessionStore { inner, meter }
    }
}

impl StateStore for MeteredSessionStore {
    forward_state_store!();
}

impl SessionStore for MeteredSessionStore {
    fn find_sessions<'a>(
        &'a self,
        key: &[u8],
        earliest_end_ms: i64,
        latest_start_ms: i64,
    ) -> Result<SessionIter<'a>, StoreError> {
        self.meter.gets.inc();
        self.inner
            .find_sessions(key, earliest_end_ms, latest_start_ms)
    }

    fn put(&mut self, session: &SessionKey, value: &[u8]) -> Result<(), StoreError> {
        self.meter.puts.inc();
        self.inner.put(session, value)
    }

    fn remove(&mut self, session: &SessionKey) -> Result<(), StoreError> {
        self.meter.puts.inc();
        self.inner.remove(session)
    }

    fn expire(&mut self, stream_time_ms: i64) -> Result<(), StoreError> {
        self.inner.expire(stream_time_ms)
    }
}

/// A key-value store whose puts, gets and size are exported; see the module docs.
pub struct MeteredKeyValueStore {
    inner: Box<dyn KeyValueStore>,
    meter: StoreMeter,
    entries: IntGauge,
}

impl MeteredKeyValueStore {
    /// Wraps `inner`, the store of task `task` (its label value, `0_1`).
    pub fn new(inner: Box<dyn KeyValueStore>, metrics: Arc<Metrics>, task: &str) -> Self {
        let meter = StoreMeter::new(metrics, task, inner.name());
        let l = [meter.labels[0].as_str(), meter.labels[1].as_str()];
        let store = MeteredKeyValueStore {
            entries: meter.metrics.store_entries.with_label_values(&l),
            inner,
            meter,
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
        self.meter.puts.inc_by(records.len() as u64);
        self.refresh_entries();
        Ok(())
    }

    fn close(&mut self) -> Result<(), StoreError> {
        self.meter.remove();
        self.inner.close()
    }
}

impl KeyValueStore for MeteredKeyValueStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.meter.gets.inc();
        self.inner.get(key)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.meter.puts.inc();
        self.inner.put(key, value)
    }

    fn put_if_absent(&mut self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.meter.gets.inc();
        let existing = self.inner.put_if_absent(key, value)?;
        if existing.is_none() {
            self.meter.puts.inc();
        }
        Ok(existing)
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.meter.puts.inc();
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

    #[test]
    fn window_stores_count_writes_and_fetches() {
        let metrics = Arc::new(Metrics::new("app"));
        let inner = crate::state::InMemoryWindowStore::new("per-minute", 60_000, 10_000).unwrap();
        let mut store = MeteredWindowStore::new(Box::new(inner), metrics.clone(), "1_0");
        store.put(b"k", 0, Some(b"1")).unwrap();
        store.put(b"k", 0, None).unwrap();
        assert_eq!(store.fetch(b"k", 0).unwrap(), None);
        assert_eq!(store.fetch_range(b"k", 0, 10).unwrap().count(), 0);
        let l = ["1_0", "per-minute"];
        assert_eq!(metrics.store_puts.with_label_values(&l).get(), 2);
        assert_eq!(metrics.store_gets.with_label_values(&l).get(), 2);
    }
}
