//! Session stores: one aggregate per key and session, segmented by end time.
//!
//! [`SegmentedSessionStore`] implements [`SessionStore`] over either backend
//! ([`InMemorySessionStore`], [`RocksDbSessionStore`]). A session ending at
//! `end` lives in segment `end.div_euclid(segment_interval_ms)`; its
//! in-segment key, also its changelog key ([`changelog_key`]), is
//! `key ++ be(end) ++ be(start)` with both times encoded order-preserving.
//!
//! [`SessionStore::expire`] with stream time `st` expires every segment
//! whose sessions all ended before `st - retention_ms`; as for window stores
//! (see [`window`](super::window)) expired segments are invisible at once,
//! take no writes, are dropped by the backend at the next commit, and an
//! abort undoes an uncommitted expiry.
//!
//! [`SessionStore::find_sessions`] returns sessions by end time, then start
//! time.

use std::ops::Bound;
use std::path::Path;

use super::backend::{Backend, Core, Write, decode_i64, encode_i64};
use super::{
    ChangelogRecord, MemoryBackend, RocksDbBackend, RocksDbMemory, SessionIter, SessionKey,
    SessionStore, StateStore, StoreError,
};

/// The changelog (and in-segment) key of a session.
pub fn changelog_key(session: &SessionKey) -> Vec<u8> {
    raw_key(&session.key, session.end_ms, session.start_ms)
}

fn raw_key(key: &[u8], end_ms: i64, start_ms: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 16);
    k.extend_from_slice(key);
    k.extend_from_slice(&encode_i64(end_ms));
    k.extend_from_slice(&encode_i64(start_ms));
    k
}

/// Decodes a changelog key into a [`SessionKey`].
pub fn parse_changelog_key(raw: &[u8]) -> Option<SessionKey> {
    let split = raw.len().checked_sub(16)?;
    Some(SessionKey {
        key: raw[..split].to_vec(),
        end_ms: decode_i64(&raw[split..split + 8]),
        start_ms: decode_i64(&raw[split + 8..]),
    })
}

/// A session store over a backend. Use the aliases [`InMemorySessionStore`]
/// and [`RocksDbSessionStore`].
pub struct SegmentedSessionStore<B> {
    core: Core<B>,
    retention_ms: i64,
    segment_interval_ms: i64,
}

/// A session store held in memory.
pub type InMemorySessionStore = SegmentedSessionStore<MemoryBackend>;

/// A session store in RocksDB, one column family per segment.
pub type RocksDbSessionStore = SegmentedSessionStore<RocksDbBackend>;

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

impl SegmentedSessionStore<MemoryBackend> {
    /// An empty in-memory session store keeping sessions for `retention_ms`
    /// after their end, in segments of `segment_interval_ms`.
    pub fn new(
        name: impl Into<String>,
        retention_ms: i64,
        segment_interval_ms: i64,
    ) -> Result<Self, StoreError> {
        let name = name.into();
        check_times(&name, retention_ms, segment_interval_ms)?;
        Ok(SegmentedSessionStore {
            core: Core::new(name, MemoryBackend::new()),
            retention_ms,
            segment_interval_ms,
        })
    }
}

impl SegmentedSessionStore<RocksDbBackend> {
    /// Opens the RocksDB session store `name` in `path`. Reopen a store with
    /// the same segment interval it was created with.
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
        Ok(SegmentedSessionStore {
            core: Core::new(name, backend),
            retention_ms,
            segment_interval_ms,
        })
    }
}

impl<B: Backend> SegmentedSessionStore<B> {
    fn segment(&self, end_ms: i64) -> i64 {
        end_ms.div_euclid(self.segment_interval_ms)
    }

    /// The backend holding the committed data.
    pub fn backend(&self) -> &B {
        &self.core.backend
    }
}

impl<B: Backend> StateStore for SegmentedSessionStore<B> {
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
            let Some(session) = parse_changelog_key(r.key) else {
                return Err(StoreError::Corrupt {
                    store: self.core.name.clone(),
                    message: format!(
                        "changelog key of {} bytes is too short for a session key (at least 16); \
                         is this the changelog of a session store?",
                        r.key.len()
                    ),
                });
            };
            writes.push((self.segment(session.end_ms), r.key, r.value));
        }
        self.core.restore(&mut writes.into_iter(), changelog_offset)
    }

    fn close(&mut self) -> Result<(), StoreError> {
        self.core.close()
    }
}

impl<B: Backend> SessionStore for SegmentedSessionStore<B> {
    fn find_sessions<'a>(
        &'a self,
        key: &[u8],
        earliest_end_ms: i64,
        latest_start_ms: i64,
    ) -> Result<SessionIter<'a>, StoreError> {
        let lo = raw_key(key, earliest_end_ms, i64::MIN);
        let hi = raw_key(key, i64::MAX, i64::MAX);
        let first = self.segment(earliest_end_ms);
        let key = key.to_vec();
        let core = &self.core;
        let iter = self
            .core
            .segments()
            .into_iter()
            .filter(move |s| *s >= first)
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
                Ok((raw, v)) => {
                    if raw.len() != key.len() + 16 || !raw.starts_with(&key) {
                        return None; // a longer key sorting between this key's sessions
                    }
                    let session = parse_changelog_key(&raw)?;
                    (session.start_ms <= latest_start_ms).then_some(Ok((session, v)))
                }
                Err(e) => Some(Err(e)),
            });
        Ok(Box::new(iter))
    }

    fn put(&mut self, session: &SessionKey, value: &[u8]) -> Result<(), StoreError> {
        let seg = self.segment(session.end_ms);
        self.core.put(seg, &changelog_key(session), Some(value));
        Ok(())
    }

    fn remove(&mut self, session: &SessionKey) -> Result<(), StoreError> {
        let seg = self.segment(session.end_ms);
        self.core.put(seg, &changelog_key(session), None);
        Ok(())
    }

    fn expire(&mut self, stream_time_ms: i64) -> Result<(), StoreError> {
        let horizon = stream_time_ms.saturating_sub(self.retention_ms);
        self.core
            .expire_below(horizon.div_euclid(self.segment_interval_ms));
        Ok(())
    }
}
