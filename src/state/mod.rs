//! State stores: the local state of a task.
//!
//! Every store is byte-oriented (keys and values are `&[u8]`); typed access
//! through serdes is layered on top by the processor API. Three kinds exist,
//! as in Kafka Streams: [`KeyValueStore`], [`WindowStore`] and
//! [`SessionStore`]. Each has a RocksDB backend (the default) and an
//! in-memory backend behind the same trait.
//!
//! # The commit invariant (exactly-once)
//!
//! A store has *committed* state and an *open* set of writes belonging to the
//! current commit interval (the open Kafka transaction):
//!
//! * reads see committed state overlaid with the open writes
//!   (read-your-writes inside the task);
//! * [`StateStore::commit`] applies the open writes **and** the changelog
//!   offset they correspond to in one atomic write, so after any crash the
//!   store holds exactly the state of some commit together with the changelog
//!   offset that state reflects;
//! * [`StateStore::abort`] discards the open writes, returning the store to
//!   its last committed state (used when the transaction aborts).
//!
//! The runtime commits stores only after the Kafka transaction that carried
//! the matching changelog records committed. On restart a task therefore
//! restores only the changelog tail after [`StateStore::committed_offset`].

use std::ops::Bound;

/// Errors raised by state stores.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// RocksDB reported an error for the named store.
    #[error("state store '{store}': RocksDB error: {source}")]
    RocksDb {
        /// The store's name.
        store: String,
        /// The underlying error.
        #[source]
        source: rocksdb::Error,
    },
    /// An I/O error on the state directory.
    #[error("state directory {path}: {source}")]
    Io {
        /// The path that failed.
        path: std::path::PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Another process holds the lock of this state directory.
    #[error(
        "state directory {path} is locked by another Weir instance; give each instance its own state_dir"
    )]
    Locked {
        /// The locked directory.
        path: std::path::PathBuf,
    },
    /// A store's on-disk data is corrupt or was written by an incompatible version.
    #[error("state store '{store}': {message}")]
    Corrupt {
        /// The store's name.
        store: String,
        /// What is wrong.
        message: String,
    },
    /// A store was asked for that the task does not have.
    #[error("no state store named '{0}' is connected to this processor")]
    UnknownStore(String),
}

/// A key and value pair read from a store.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// An iterator over store entries in key order; it reads lazily.
pub type KvIter<'a> = Box<dyn Iterator<Item = Result<KeyValue, StoreError>> + 'a>;

/// What every store offers, whatever its kind.
pub trait StateStore: Send {
    /// The store's name, unique within the topology.
    fn name(&self) -> &str;

    /// Applies the open writes together with `changelog_offset` (the offset
    /// of the last changelog record these writes produced, if any) in one
    /// atomic write. See the module docs for the invariant.
    fn commit(&mut self, changelog_offset: Option<i64>) -> Result<(), StoreError>;

    /// Discards the writes made since the last commit.
    fn abort(&mut self);

    /// The changelog offset stored with the last commit, if any.
    fn committed_offset(&self) -> Option<i64>;

    /// Flushes and releases resources. Open writes are discarded.
    fn close(&mut self) -> Result<(), StoreError> {
        self.abort();
        Ok(())
    }
}

/// A key-value store (Kafka Streams' `KeyValueStore`).
pub trait KeyValueStore: StateStore {
    /// The value for `key`, if present.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// Sets `key` to `value`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError>;

    /// Sets `key` to `value` only when absent; returns the existing value otherwise.
    fn put_if_absent(&mut self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.get(key)? {
            Some(existing) => Ok(Some(existing)),
            None => {
                self.put(key, value)?;
                Ok(None)
            }
        }
    }

    /// Removes `key`; returns the value it had.
    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// Entries with keys in the given bounds, in key order.
    fn range<'a>(&'a self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter<'a>, StoreError>;

    /// Entries whose key starts with `prefix`, in key order.
    fn prefix_scan<'a>(&'a self, prefix: &[u8]) -> Result<KvIter<'a>, StoreError>;

    /// All entries, in key order.
    fn all<'a>(&'a self) -> Result<KvIter<'a>, StoreError> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }

    /// An estimate of the number of entries.
    fn approximate_num_entries(&self) -> Result<u64, StoreError>;
}

/// A window store: values per key and window start time (milliseconds).
pub trait WindowStore: StateStore {
    /// Stores `value` for `key` in the window starting at `window_start_ms`.
    /// `None` removes the entry.
    fn put(
        &mut self,
        key: &[u8],
        window_start_ms: i64,
        value: Option<&[u8]>,
    ) -> Result<(), StoreError>;

    /// The value for `key` in the window starting at `window_start_ms`.
    fn fetch(&self, key: &[u8], window_start_ms: i64) -> Result<Option<Vec<u8>>, StoreError>;

    /// Windows of `key` whose start lies in `[from_ms, to_ms]`, in start order.
    fn fetch_range<'a>(
        &'a self,
        key: &[u8],
        from_ms: i64,
        to_ms: i64,
    ) -> Result<WindowIter<'a>, StoreError>;

    /// Windows of all keys whose start lies in `[from_ms, to_ms]`.
    fn fetch_all<'a>(&'a self, from_ms: i64, to_ms: i64) -> Result<WindowIter<'a>, StoreError>;

    /// Drops whole segments whose windows all started before `stream_time_ms - retention`.
    fn expire(&mut self, stream_time_ms: i64) -> Result<(), StoreError>;
}

/// One window entry: key, window start (ms), value.
pub type WindowEntry = (Vec<u8>, i64, Vec<u8>);

/// An iterator over window entries.
pub type WindowIter<'a> = Box<dyn Iterator<Item = Result<WindowEntry, StoreError>> + 'a>;

/// A session: its key and its `[start_ms, end_ms]` time span.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionKey {
    /// The record key.
    pub key: Vec<u8>,
    /// Timestamp of the session's first record.
    pub start_ms: i64,
    /// Timestamp of the session's last record.
    pub end_ms: i64,
}

/// An iterator over sessions and their aggregates.
pub type SessionIter<'a> = Box<dyn Iterator<Item = Result<(SessionKey, Vec<u8>), StoreError>> + 'a>;

/// A session store (Kafka Streams' `SessionStore`).
pub trait SessionStore: StateStore {
    /// Sessions of `key` that overlap `[earliest_end_ms, latest_start_ms]`:
    /// those with `end >= earliest_end_ms` and `start <= latest_start_ms`.
    fn find_sessions<'a>(
        &'a self,
        key: &[u8],
        earliest_end_ms: i64,
        latest_start_ms: i64,
    ) -> Result<SessionIter<'a>, StoreError>;

    /// Stores the aggregate of a session.
    fn put(&mut self, session: &SessionKey, value: &[u8]) -> Result<(), StoreError>;

    /// Removes a session.
    fn remove(&mut self, session: &SessionKey) -> Result<(), StoreError>;

    /// Drops sessions that ended before `stream_time_ms - retention`.
    fn expire(&mut self, stream_time_ms: i64) -> Result<(), StoreError>;
}
