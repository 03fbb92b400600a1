//! Typed, logged handles to a task's window and session stores.
//!
//! Same typed and logging layer as key-value handles (see `typed.rs`): every write goes
//! to the backend's open writes, then its changelog record — keyed by the
//! store's changelog key ([`crate::state::window::changelog_key`],
//! [`crate::state::session::changelog_key`]) — goes through the call's
//! collector in the same transaction as the outputs.

use crate::state::{SessionKey, SessionStore, WindowStore};

use super::error::ProcessorError;
use super::frame::Frame;
use super::store::{AnyStore, StoreCell, StoreKind, StoreSlot};
use super::typed::TypedStore;

fn window_store(cell: &mut StoreCell) -> &mut dyn WindowStore {
    match &mut cell.store {
        AnyStore::Window(s) => s.as_mut(),
        _ => unreachable!("the kind was checked when the handle was made"),
    }
}

fn session_store(cell: &mut StoreCell) -> &mut dyn SessionStore {
    match &mut cell.store {
        AnyStore::Session(s) => s.as_mut(),
        _ => unreachable!("the kind was checked when the handle was made"),
    }
}

/// A typed handle to a window store of the task (from
/// [`super::ProcessorContext::window_store`]): values per key and window
/// start. Writes are logged.
pub struct WindowStoreHandle<'a, K, V>(TypedStore<'a, K, V>);

impl<K, V> Clone for WindowStoreHandle<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for WindowStoreHandle<'_, K, V> {}

impl<'a, K: 'static, V: 'static> WindowStoreHandle<'a, K, V> {
    pub(crate) fn new(frame: &'a Frame<'a>, slot: &'a StoreSlot) -> Result<Self, ProcessorError> {
        TypedStore::new(frame, slot, StoreKind::Window).map(WindowStoreHandle)
    }

    /// The store's name.
    pub fn name(&self) -> &'a str {
        self.0.name()
    }

    /// The value of `key`'s window starting at `start_ms`.
    pub fn fetch(&self, key: &K, start_ms: i64) -> Result<Option<V>, ProcessorError> {
        let k = self.0.encode_key(key)?;
        let bytes = window_store(&mut *self.0.cell()?).fetch(&k, start_ms)?;
        bytes.map(|b| self.0.decode_value(&b)).transpose()
    }

    /// Sets (`Some`) or deletes (`None`) `key`'s window starting at
    /// `start_ms`, and logs the write. Writes into expired segments are
    /// ignored by the store.
    pub fn put(&self, key: &K, start_ms: i64, value: Option<&V>) -> Result<(), ProcessorError> {
        let k = self.0.encode_key(key)?;
        let v = value.map(|v| self.0.encode_value(v)).transpose()?;
        window_store(&mut *self.0.cell()?).put(&k, start_ms, v.as_deref())?;
        let changelog_key = crate::state::window::changelog_key(&k, start_ms);
        self.0.log(&changelog_key, v.as_deref())
    }

    /// `key`'s windows starting in `[from_ms, to_ms]`, as `(start, value)`
    /// by start time.
    pub fn fetch_range(
        &self,
        key: &K,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<(i64, V)>, ProcessorError> {
        let k = self.0.encode_key(key)?;
        let mut cell = self.0.cell()?;
        let mut out = Vec::new();
        for entry in window_store(&mut cell).fetch_range(&k, from_ms, to_ms)? {
            let (_, start, v) = entry?;
            out.push((start, self.0.decode_value(&v)?));
        }
        Ok(out)
    }

    /// All windows of all keys starting in `[from_ms, to_ms]`, as
    /// `(key, start, value)`, in store order (see [`crate::state::window`]).
    pub fn fetch_all(&self, from_ms: i64, to_ms: i64) -> Result<Vec<(K, i64, V)>, ProcessorError> {
        let mut cell = self.0.cell()?;
        let mut out = Vec::new();
        for entry in window_store(&mut cell).fetch_all(from_ms, to_ms)? {
            let (k, start, v) = entry?;
            out.push((self.0.decode_key(&k)?, start, self.0.decode_value(&v)?));
        }
        Ok(out)
    }

    /// Expires windows older than the retention at stream time `stream_time_ms`.
    pub fn expire(&self, stream_time_ms: i64) -> Result<(), ProcessorError> {
        Ok(window_store(&mut *self.0.cell()?).expire(stream_time_ms)?)
    }
}

/// A typed handle to a session store of the task (from
/// [`super::ProcessorContext::session_store`]): one aggregate per key and
/// session `[start, end]`. Writes are logged.
pub struct SessionStoreHandle<'a, K, V>(TypedStore<'a, K, V>);

impl<K, V> Clone for SessionStoreHandle<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for SessionStoreHandle<'_, K, V> {}

impl<'a, K: 'static, V: 'static> SessionStoreHandle<'a, K, V> {
    pub(crate) fn new(frame: &'a Frame<'a>, slot: &'a StoreSlot) -> Result<Self, ProcessorError> {
        TypedStore::new(frame, slot, StoreKind::Session).map(SessionStoreHandle)
    }

    /// The store's name.
    pub fn name(&self) -> &'a str {
        self.0.name()
    }

    /// `key`'s sessions that end at or after `earliest_end_ms` and start at
    /// or before `latest_start_ms`, as `((start, end), value)` by end time.
    #[allow(clippy::type_complexity)]
    pub fn find_sessions(
        &self,
        key: &K,
        earliest_end_ms: i64,
        latest_start_ms: i64,
    ) -> Result<Vec<((i64, i64), V)>, ProcessorError> {
        let k = self.0.encode_key(key)?;
        let mut cell = self.0.cell()?;
        let mut out = Vec::new();
        for entry in session_store(&mut cell).find_sessions(&k, earliest_end_ms, latest_start_ms)? {
            let (s, v) = entry?;
            out.push(((s.start_ms, s.end_ms), self.0.decode_value(&v)?));
        }
        Ok(out)
    }

    /// Stores `value` for `key`'s session `[start_ms, end_ms]` and logs it.
    pub fn put(
        &self,
        key: &K,
        start_ms: i64,
        end_ms: i64,
        value: &V,
    ) -> Result<(), ProcessorError> {
        let session = SessionKey {
            key: self.0.encode_key(key)?,
            start_ms,
            end_ms,
        };
        let v = self.0.encode_value(value)?;
        session_store(&mut *self.0.cell()?).put(&session, &v)?;
        let changelog_key = crate::state::session::changelog_key(&session);
        self.0.log(&changelog_key, Some(&v))
    }

    /// Removes `key`'s session `[start_ms, end_ms]` and logs a tombstone.
    pub fn remove(&self, key: &K, start_ms: i64, end_ms: i64) -> Result<(), ProcessorError> {
        let session = SessionKey {
            key: self.0.encode_key(key)?,
            start_ms,
            end_ms,
        };
        session_store(&mut *self.0.cell()?).remove(&session)?;
        let changelog_key = crate::state::session::changelog_key(&session);
        self.0.log(&changelog_key, None)
    }

    /// Expires sessions older than the retention at stream time `stream_time_ms`.
    pub fn expire(&self, stream_time_ms: i64) -> Result<(), ProcessorError> {
        Ok(session_store(&mut *self.0.cell()?).expire(stream_time_ms)?)
    }
}
