//! Window stores: values per key and window start, segmented by time.
//!
//! [`SegmentedWindowStore`] implements [`WindowStore`] over either backend
//! ([`InMemoryWindowStore`], [`RocksDbWindowStore`]). Time is cut into
//! *segments* of `segment_interval_ms`; a window starting at `t` lives in
//! segment `t.div_euclid(segment_interval_ms)` (one RocksDB column family
//! per segment). Inside a segment an entry's key is
//! `key ++ be(start)` with the start encoded order-preserving (8 bytes,
//! sign bit flipped), which is also its changelog key
//! ([`changelog_key`]).
//!
//! Retention and expiry: [`WindowStore::expire`] with stream time `st`
//! expires every segment whose windows all started before
//! `st - retention_ms`. Expired segments are invisible at once, puts into
//! them are ignored (the record is late), and the backend drops the whole
//! segment at the next commit; [`StateStore::abort`] undoes an expiry that
//! was not committed. Expiry works at segment granularity: windows up to one
//! `segment_interval_ms` older than the retention may still be returned.
//!
//! Ordering: [`WindowStore::fetch_range`] returns one key's windows by start
//! time; [`WindowStore::fetch_all`] returns entries segment by segment, and
//! within a segment by key, then start time.
//!
//! ```
//! use weir::state::{InMemoryWindowStore, StateStore, WindowStore};
//!
//! // Keep windows for 10 s, in segments of 5 s.
//! let mut store = InMemoryWindowStore::new("clicks", 10_000, 5_000).unwrap();
//! store.put(b"user", 0, Some(b"3")).unwrap();
//! store.put(b"user", 1_000, Some(b"5")).unwrap();
//! store.commit(Some(1)).unwrap();
//! let windows: Vec<_> = store.fetch_range(b"user", 0, 1_000).unwrap().map(Result::unwrap).collect();
//! assert_eq!(windows.len(), 2);
//! store.expire(20_000).unwrap(); // all windows started before 10 000: dropped
//! assert_eq!(store.fetch(b"user", 0).unwrap(), None);
//! ```

use std::ops::Bound;
use std::path::Path;

use super::backend::{Backend, Core, Write, decode_i64, encode_i64};
use super::{
    ChangelogRecord, MemoryBackend, RocksDbBackend, RocksDbMemory, StateStore, StoreError,
    WindowEntry, WindowIter, WindowStore,
};

/// The changelog (and in-segment) key of `key`'s window starting at
/// `window_start_ms`.
pub fn changelog_key(key: &[u8], window_start_ms: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 8);
    k.extend_from_slice(key);
    k.extend_from_slice(&encode_i64(window_start_ms));
    k
}

/// Splits a changelog key into record key and window start.
pub fn split_changelog_key(raw: &[u8]) -> Option<(&[u8], i64)> {
    let split = raw.len().checked_sub(8)?;
    Some((&raw[..split], decode_i64(&raw[split..])))
}

/// A window store over a backend. Use the aliases [`InMemoryWindowStore`]
/// and [`RocksDbWindowStore`].
pub struct SegmentedWindowStore<B> {
    core: Core<B>,
    retention_ms: i64,
    segment_interval_ms: i64,
}

/// A window store held in memory.
pub type InMemoryWindowStore = SegmentedWindowStore<MemoryBackend>;

/// A window store in RocksDB, one column family per segment.
pub type RocksDbWindowStore = SegmentedWindowStore<RocksDbBackend>;

fn check_times(name: &str, retention_ms: i64, segment_interval_ms: i64) -> Result<(), StoreError> {
    if retention_ms < 0 || segment_interval_ms <= 0 {
        return Err(StoreError::InvalidState {
            store: name.to_string(),
            message: format!(
                "retention_ms ({retention_ms}) must be >= 0 and segment_interval_ms \
                 ({segment_interval_ms}) > 0"
            ),
        });
    }
    Ok(())
}

impl SegmentedWindowStore<MemoryBackend> {
    /// An empty in-memory window store keeping windows for `retention_ms`
    /// in segments of `segment_interval_ms`.
    pub fn new(
        name: impl Into<String>,
        retention_ms: i64,
        segment_interval_ms: i64,
    ) -> Result<Self, StoreError> {
        let name = name.into();
        check_times(&name, retention_ms, segment_interval_ms)?;
        Ok(SegmentedWindowStore {
            core: Core::new(name, MemoryBackend::new()),
            retention_ms,
            segment_interval_ms,
        })
    }
}

impl SegmentedWindowStore<RocksDbBackend> {
    /// Opens the RocksDB window store `name` in `path`, keeping windows for
    /// `retention_ms` in segments of `segment_interval_ms`. Reopen a store
    /// with the same segment interval it was created with.
    pub fn open(
        path: &Path,
        name: impl Into<String>,
        memory: &RocksDbMemory,
        retention_ms: i64,
        segment_interval_ms: i64,
    ) -> Result<Self, StoreError> {
        let name = name.into();
        check_times(&name, retention_ms, segment_interval_ms)?;
        let backend = RocksDbBackend::open(path, &name, memory, true)?;
        Ok(SegmentedWindowStore {
            core: Core::new(name, backend),
            retention_ms,
            segment_interval_ms,
        })
    }
}

impl<B: Backend> SegmentedWindowStore<B> {
    fn segment(&self, window_start_ms: i64) -> i64 {
        window_start_ms.div_euclid(self.segment_interval_ms)
    }

    /// The backend holding the committed data.
    pub fn backend(&self) -> &B {
        &self.core.backend
    }

    /// How long windows are kept, in milliseconds.
    pub fn retention_ms(&self) -> i64 {
        self.retention_ms
    }

    /// Live segments overlapping window starts `[from_ms, to_ms]`, ascending.
    fn segments_between(&self, from_ms: i64, to_ms: i64) -> Vec<i64> {
        let (lo, hi) = (self.segment(from_ms), self.segment(to_ms));
        self.core
            .segments()
            .into_iter()
            .filter(|s| (lo..=hi).contains(s))
            .collect()
    }
}

impl<B: Backend> StateStore for SegmentedWindowStore<B> {
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
        let mut writes: Vec<Write<'_>> = Vec::with_capacity(records.len());
        for r in records {
            let Some((_, start)) = split_changelog_key(r.key) else {
                return Err(StoreError::Corrupt {
                    store: self.core.name.clone(),
                    message: format!(
                        "changelog key of {} bytes is too short for a window key (at least 8); \
                         is this the changelog of a window store?",
                        r.key.len()
                    ),
                });
            };
            writes.push((self.segment(start), r.key, r.value));
        }
        self.core.restore(&mut writes.into_iter(), changelog_offset)
    }

    fn close(&mut self) -> Result<(), StoreError> {
        self.core.close()
    }
}

impl<B: Backend> WindowStore for SegmentedWindowStore<B> {
    fn put(
        &mut self,
        key: &[u8],
        window_start_ms: i64,
        value: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        let seg = self.segment(window_start_ms);
        self.core
            .put(seg, &changelog_key(key, window_start_ms), value);
        Ok(())
    }

    fn fetch(&self, key: &[u8], window_start_ms: i64) -> Result<Option<Vec<u8>>, StoreError> {
        self.core.get(
            self.segment(window_start_ms),
            &changelog_key(key, window_start_ms),
        )
    }

    fn fetch_range<'a>(
        &'a self,
        key: &[u8],
        from_ms: i64,
        to_ms: i64,
    ) -> Result<WindowIter<'a>, StoreError> {
        if from_ms > to_ms {
            return Ok(Box::new(std::iter::empty()));
        }
        let lo = changelog_key(key, from_ms);
        let hi = changelog_key(key, to_ms);
        let key = key.to_vec();
        let core = &self.core;
        let iter =
            self.segments_between(from_ms, to_ms)
                .into_iter()
                .flat_map(move |seg| {
                    match core.range(
                        seg,
                        Bound::Included(lo.as_slice()),
                        Bound::Included(hi.as_slice()),
                    ) {
                        Ok(it) => it,
                        Err(e) => Box::new(std::iter::once(Err(e))),
                    }
                })
                .filter_map(move |item| match item {
                    // Keys that extend `key` can sort between its windows; skip them.
                    Ok((raw, v)) => (raw.len() == key.len() + 8 && raw.starts_with(&key))
                        .then(|| Ok(entry(raw, v))),
                    Err(e) => Some(Err(e)),
                });
        Ok(Box::new(iter))
    }

    fn fetch_all<'a>(&'a self, from_ms: i64, to_ms: i64) -> Result<WindowIter<'a>, StoreError> {
        if from_ms > to_ms {
            return Ok(Box::new(std::iter::empty()));
        }
        let core = &self.core;
        let iter = self
            .segments_between(from_ms, to_ms)
            .into_iter()
            .flat_map(
                move |seg| match core.range(seg, Bound::Unbounded, Bound::Unbounded) {
                    Ok(it) => it,
                    Err(e) => Box::new(std::iter::once(Err(e))),
                },
            )
            .filter_map(move |item| match item {
                Ok((raw, v)) => {
                    let (_, start) = split_changelog_key(&raw)?;
                    (from_ms..=to_ms)
                        .contains(&start)
                        .then(|| Ok(entry(raw, v)))
                }
                Err(e) => Some(Err(e)),
            });
        Ok(Box::new(iter))
    }

    fn expire(&mut self, stream_time_ms: i64) -> Result<(), StoreError> {
        let horizon = stream_time_ms.saturating_sub(self.retention_ms);
        self.core
            .expire_below(horizon.div_euclid(self.segment_interval_ms));
        Ok(())
    }
}

fn entry(mut raw: Vec<u8>, value: Vec<u8>) -> WindowEntry {
    let split = raw.len() - 8;
    let start = decode_i64(&raw[split..]);
    raw.truncate(split);
    (raw, start, value)
}
