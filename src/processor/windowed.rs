//! Typed, logged handles to a task's window and session stores.
//!
//! Same logging layer as key-value handles (see `store.rs`): every write goes
//! to the backend's open writes, then its changelog record — keyed by the
//! store's changelog key ([`crate::state::window::changelog_key`],
//! [`crate::state::session::changelog_key`]) — goes through the call's
//! collector in the same transaction as the outputs.

use crate::serdes::{Serde, short_type_name};
use crate::state::{SessionKey, SessionStore, WindowStore};

use super::context::Frame;
use super::error::{KeyOrValue, ProcessorError};
use super::store::{AnyStore, StoreCell, StoreSlot};

/// Shared typed plumbing of the two handles.
struct Typed<'a, K, V> {
    frame: &'a Frame<'a>,
    slot: &'a StoreSlot,
    key_serde: &'a dyn Serde<K>,
    value_serde: &'a dyn Serde<V>,
}

impl<K, V> Clone for Typed<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for Typed<'_, K, V> {}

impl<'a, K: 'static, V: 'static> Typed<'a, K, V> {
    fn new(
        frame: &'a Frame<'a>,
        slot: &'a StoreSlot,
        kind: &'static str,
    ) -> Result<Self, ProcessorError> {
        slot.expect_kind(kind)?;
        let Some((key_serde, value_serde)) = slot.serdes.typed::<K, V>() else {
            return Err(ProcessorError::StoreType {
                store: slot.name.clone(),
                actual_key: slot.serdes.key_type,
                actual_value: slot.serdes.value_type,
                asked_key: short_type_name::<K>(),
                asked_value: short_type_name::<V>(),
            });
        };
        Ok(Typed {
            frame,
            slot,
            key_serde,
            value_serde,
        })
    }

    fn encode_key(&self, key: &K) -> Result<Vec<u8>, ProcessorError> {
        let mut out = Vec::new();
        self.key_serde
            .serialize(&self.slot.name, key, &mut out)
            .map_err(|source| ProcessorError::Serialize {
                what: KeyOrValue::Key,
                target: self.slot.name.clone(),
                source,
            })?;
        Ok(out)
    }

    fn encode_value(&self, value: &V) -> Result<Vec<u8>, ProcessorError> {
        let mut out = Vec::new();
        self.value_serde
            .serialize(&self.slot.name, value, &mut out)
            .map_err(|source| ProcessorError::Serialize {
                what: KeyOrValue::Value,
                target: self.slot.name.clone(),
                source,
            })?;
        Ok(out)
    }

    fn decode_key(&self, bytes: &[u8]) -> Result<K, ProcessorError> {
        self.key_serde
            .deserialize(&self.slot.name, bytes)
            .map_err(|source| ProcessorError::StoreRead {
                what: KeyOrValue::Key,
                store: self.slot.name.clone(),
                source,
            })
    }

    fn decode_value(&self, bytes: &[u8]) -> Result<V, ProcessorError> {
        self.value_serde
            .deserialize(&self.slot.name, bytes)
            .map_err(|source| ProcessorError::StoreRead {
                what: KeyOrValue::Value,
                store: self.slot.name.clone(),
                source,
            })
    }
}

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
pub struct WindowStoreHandle<'a, K, V>(Typed<'a, K, V>);

impl<K, V> Clone for WindowStoreHandle<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for WindowStoreHandle<'_, K, V> {}

impl<'a, K: 'static, V: 'static> WindowStoreHandle<'a, K, V> {
    pub(crate) fn new(frame: &'a Frame<'a>, slot: &'a StoreSlot) -> Result<Self, ProcessorError> {
        Typed::new(frame, slot, "window").map(WindowStoreHandle)
    }

    /// The store's name.
    pub fn name(&self) -> &'a str {
        &self.0.slot.name
    }

    /// The value of `key`'s window starting at `start_ms`.
    pub fn fetch(&self, key: &K, start_ms: i64) -> Result<Option<V>, ProcessorError> {
        let k = self.0.encode_key(key)?;
        let bytes = window_store(&mut *self.0.slot.cell()?).fetch(&k, start_ms)?;
        bytes.map(|b| self.0.decode_value(&b)).transpose()
    }

    /// Sets (`Some`) or deletes (`None`) `key`'s window starting at
    /// `start_ms`, and logs the write. Writes into expired segments are
    /// ignored by the store.
    pub fn put(&self, key: &K, start_ms: i64, value: Option<&V>) -> Result<(), ProcessorError> {
        let k = self.0.encode_key(key)?;
        let v = value.map(|v| self.0.encode_value(v)).transpose()?;
        window_store(&mut *self.0.slot.cell()?).put(&k, start_ms, v.as_deref())?;
        let changelog_key = crate::state::window::changelog_key(&k, start_ms);
        self.0.slot.log(self.0.frame, &changelog_key, v.as_deref())
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
        let mut cell = self.0.slot.cell()?;
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
        let mut cell = self.0.slot.cell()?;
        let mut out = Vec::new();
        for entry in window_store(&mut cell).fetch_all(from_ms, to_ms)? {
            let (k, start, v) = entry?;
            out.push((self.0.decode_key(&k)?, start, self.0.decode_value(&v)?));
        }
        Ok(out)
    }

    /// Expires windows older than the retention at stream time `stream_time_ms`.
    pub fn expire(&self, stream_time_ms: i64) -> Result<(), ProcessorError> {
        Ok(window_store(&mut *self.0.slot.cell()?).expire(stream_time_ms)?)
    }
}

/// A typed handle to a session store of the task (from
/// [`super::ProcessorContext::session_store`]): one aggregate per key and
/// session `[start, end]`. Writes are logged.
pub struct SessionStoreHandle<'a, K, V>(Typed<'a, K, V>);

impl<K, V> Clone for SessionStoreHandle<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for SessionStoreHandle<'_, K, V> {}

impl<'a, K: 'static, V: 'static> SessionStoreHandle<'a, K, V> {
    pub(crate) fn new(frame: &'a Frame<'a>, slot: &'a StoreSlot) -> Result<Self, ProcessorError> {
        Typed::new(frame, slot, "session").map(SessionStoreHandle)
    }

    /// The store's name.
    pub fn name(&self) -> &'a str {
        &self.0.slot.name
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
        let mut cell = self.0.slot.cell()?;
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
        session_store(&mut *self.0.slot.cell()?).put(&session, &v)?;
        let changelog_key = crate::state::session::changelog_key(&session);
        self.0.slot.log(self.0.frame, &changelog_key, Some(&v))
    }

    /// Removes `key`'s session `[start_ms, end_ms]` and logs a tombstone.
    pub fn remove(&self, key: &K, start_ms: i64, end_ms: i64) -> Result<(), ProcessorError> {
        let session = SessionKey {
            key: self.0.encode_key(key)?,
            start_ms,
            end_ms,
        };
        session_store(&mut *self.0.slot.cell()?).remove(&session)?;
        let changelog_key = crate::state::session::changelog_key(&session);
        self.0.slot.log(self.0.frame, &changelog_key, None)
    }

    /// Expires sessions older than the retention at stream time `stream_time_ms`.
    pub fn expire(&self, stream_time_ms: i64) -> Result<(), ProcessorError> {
        Ok(session_store(&mut *self.0.slot.cell()?).expire(stream_time_ms)?)
    }
}
