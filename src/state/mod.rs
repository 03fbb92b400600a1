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
//!
//! ## How the invariant is kept
//!
//! Open writes never reach the backend before commit: every store keeps them
//! in an in-memory overlay (a sorted map of key to value-or-tombstone, see
//! `backend.rs`) that reads merge over the committed data. `commit` hands the
//! overlay and the new changelog offset to the backend as one unit:
//!
//! * in-memory backend: applied to the committed maps in one step;
//! * RocksDB backend: one `WriteBatch` holding the data and the offset (in a
//!   metadata column family), written through RocksDB's write-ahead log
//!   without `sync`. The log append survives a killed process (it is in the
//!   page cache) and RocksDB replays it on open; a machine crash may lose
//!   the unsynced tail, and point-in-time recovery then stops at the last
//!   complete batch, whose offset matches its data. So a store always
//!   reports the offset of the data it holds, and restores the rest from
//!   its changelog. By default the batch is written by a background thread
//!   (`background_commit_writes` in [`StateConfig`]); until it lands, the
//!   store reads its writes from a second, pending overlay, and the next
//!   commit, a restore, `close` and drop wait for it.
//!
//! A commit therefore costs one log append per store that wrote anything
//! (commits without writes and without an offset change do not touch
//! RocksDB); memtables are flushed by RocksDB when they fill, not per
//! commit, as in Kafka Streams. Flushing the memtables at every commit
//! instead costs 11-20 ms per commit of 1 000 puts on a 2-core machine.
//!
//! `abort` clears the overlay, so aborting never touches the backend.
//! [`StateStore::restore_batch`] writes changelog records directly as
//! committed state with their offset in one atomic write that skips the WAL
//! and does not flush (a crash mid-restore may lose the restore's unflushed
//! tail, never split a batch, and the store keeps reporting the offset
//! matching its data); the first commit after a restore flushes once. Pass
//! large batches (thousands of records) and commit once restored.
//!
//! Iterators borrow the store: the borrow checker ends every scan before
//! the next write, commit or abort.
//!
//! # Submodules
//!
//! * [`config`]: [`StateConfig`], the typed configuration of this layer;
//! * [`dir`]: the state directory layout and its instance lock;
//! * [`backend`]: the overlay of open writes and the backend contract;
//! * [`memory`] and [`rocks`]: the two backends;
//! * [`kv`], [`window`], [`session`]: the three store kinds;
//! * [`cache`]: the record cache's memory budget ([`CacheBudget`]);
//! * [`timestamped`]: the value-with-timestamp encoding the DSL uses.

use std::ops::Bound;

pub mod backend;
pub mod cache;
pub mod config;
pub mod dir;
pub mod kv;
pub mod memory;
mod open;
pub mod rocks;
pub mod session;
pub mod timestamped;
pub mod window;

pub use backend::Backend;
pub use cache::CacheBudget;
pub use config::{StateConfig, StoreBackend};
pub use dir::StateDirectory;
pub use kv::KvStore;
pub use memory::{InMemoryKeyValueStore, MemoryBackend};
pub use open::{open_key_value_store, open_session_store, open_window_store};
pub use rocks::{RocksDbBackend, RocksDbKeyValueStore, RocksDbMemory, RocksDbMemoryUsage};
pub use session::{InMemorySessionStore, RocksDbSessionStore, SegmentedSessionStore};
pub use window::{InMemoryWindowStore, RocksDbWindowStore, SegmentedWindowStore};

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
    /// An operation was called in a state that does not allow it.
    #[error("state store '{store}': {message}")]
    InvalidState {
        /// The store's name.
        store: String,
        /// What was attempted and what to do instead.
        message: String,
    },
}

impl StoreError {
    /// True when retrying the same operation may succeed (RocksDB busy or
    /// timed out, interrupted I/O); the runtime retries with backoff.
    pub fn is_retriable(&self) -> bool {
        match self {
            StoreError::RocksDb { source, .. } => matches!(
                source.kind(),
                rocksdb::ErrorKind::Busy
                    | rocksdb::ErrorKind::TryAgain
                    | rocksdb::ErrorKind::TimedOut
                    | rocksdb::ErrorKind::Incomplete
            ),
            StoreError::Io { source, .. } => matches!(
                source.kind(),
                std::io::ErrorKind::Interrupted
                    | std::io::ErrorKind::WouldBlock
                    | std::io::ErrorKind::TimedOut
            ),
            _ => false,
        }
    }

    /// True when the store cannot be used as it is: its files are corrupt
    /// or the directory belongs to another instance. The runtime stops the
    /// task; for [`StoreError::Corrupt`] it may wipe the store and restore
    /// it from the changelog.
    pub fn is_fatal(&self) -> bool {
        match self {
            StoreError::Corrupt { .. } | StoreError::Locked { .. } => true,
            StoreError::RocksDb { source, .. } => matches!(
                source.kind(),
                rocksdb::ErrorKind::Corruption | rocksdb::ErrorKind::NotSupported
            ),
            _ => false,
        }
    }

    pub(crate) fn rocks(store: &str, source: rocksdb::Error) -> Self {
        StoreError::RocksDb {
            store: store.to_string(),
            source,
        }
    }

    pub(crate) fn io(path: impl Into<std::path::PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io {
            path: path.into(),
            source,
        }
    }
}

/// One record read from a store's changelog topic, handed to
/// [`StateStore::restore_batch`]. `value: None` is a tombstone.
///
/// The key is in the store's changelog key format: the plain key for
/// key-value stores, [`window::changelog_key`] for window stores and
/// [`session::changelog_key`] for session stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangelogRecord<'a> {
    /// The changelog record's key.
    pub key: &'a [u8],
    /// The changelog record's value; `None` deletes the key.
    pub value: Option<&'a [u8]>,
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
    /// of the last changelog record these writes produced; `None` keeps the
    /// previously committed offset) in one atomic write that is durable when
    /// `commit` returns. See the module docs for the invariant.
    fn commit(&mut self, changelog_offset: Option<i64>) -> Result<(), StoreError>;

    /// Discards the writes made since the last commit.
    fn abort(&mut self);

    /// The changelog offset stored with the last commit, if any.
    fn committed_offset(&self) -> Option<i64>;

    /// Writes changelog records directly as committed state together with
    /// `changelog_offset` (the offset of the last record of the batch), in
    /// one atomic, durable write. Used to restore a store from its changelog
    /// before processing starts. Fails with [`StoreError::InvalidState`]
    /// when the store has open writes (commit or abort them first).
    fn restore_batch(
        &mut self,
        records: &[ChangelogRecord<'_>],
        changelog_offset: i64,
    ) -> Result<(), StoreError>;

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

impl<S: StateStore + ?Sized> StateStore for Box<S> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn commit(&mut self, changelog_offset: Option<i64>) -> Result<(), StoreError> {
        (**self).commit(changelog_offset)
    }
    fn abort(&mut self) {
        (**self).abort()
    }
    fn committed_offset(&self) -> Option<i64> {
        (**self).committed_offset()
    }
    fn restore_batch(
        &mut self,
        records: &[ChangelogRecord<'_>],
        changelog_offset: i64,
    ) -> Result<(), StoreError> {
        (**self).restore_batch(records, changelog_offset)
    }
    fn close(&mut self) -> Result<(), StoreError> {
        (**self).close()
    }
}

impl<S: KeyValueStore + ?Sized> KeyValueStore for Box<S> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        (**self).get(key)
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        (**self).put(key, value)
    }
    fn put_if_absent(&mut self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        (**self).put_if_absent(key, value)
    }
    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        (**self).delete(key)
    }
    fn range<'a>(&'a self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<KvIter<'a>, StoreError> {
        (**self).range(from, to)
    }
    fn prefix_scan<'a>(&'a self, prefix: &[u8]) -> Result<KvIter<'a>, StoreError> {
        (**self).prefix_scan(prefix)
    }
    fn all<'a>(&'a self) -> Result<KvIter<'a>, StoreError> {
        (**self).all()
    }
    fn approximate_num_entries(&self) -> Result<u64, StoreError> {
        (**self).approximate_num_entries()
    }
}

/// The kind of a state store. A typed handle checks it when it is made
/// (a window store cannot be opened as a key-value store).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreKind {
    /// A key-value store ([`KeyValueStore`]).
    KeyValue,
    /// A window store ([`WindowStore`]): windows are kept
    /// [`Retention::retention_ms`] after their start.
    Window,
    /// A session store ([`SessionStore`]): sessions are kept
    /// [`Retention::retention_ms`] after their end.
    Session,
}

impl StoreKind {
    /// `"key-value"`, `"window"` or `"session"`.
    pub fn label(&self) -> &'static str {
        match self {
            StoreKind::KeyValue => "key-value",
            StoreKind::Window => "window",
            StoreKind::Session => "session",
        }
    }
}

impl std::fmt::Display for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// How long a window or session store keeps its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Retention {
    /// How long an entry is kept (after a window's start, a session's end), ms.
    pub retention_ms: i64,
    /// Width of one store segment (ms); expiry drops whole segments.
    pub segment_interval_ms: i64,
}
