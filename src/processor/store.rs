//! Typed, logged access to a task's state stores.
//!
//! The task owns each store as a [`StoreSlot`]: the byte-level backend (from
//! the [`StoreProvider`]; key-value, window or session, see [`StoreKind`]),
//! the store's serdes, reusable key/value buffers, and the changelog topic
//! when logging is on. Window and session handles live in `windowed.rs`.
//!
//! # The logging layer
//!
//! Every `put`/`delete` through a [`KeyValueStoreHandle`] first writes the
//! backend (into its open, uncommitted writes) and then emits the changelog
//! record — topic `<application_id>-<store>-changelog`, partition = the task's
//! partition, the serialized key, the value or a tombstone, the timestamp of the
//! record being processed — through the call's [`RecordCollector`], so the
//! runtime sends it in the same transaction as the outputs. Restoration writes
//! the backend directly and logs nothing.

use std::any::Any;
use std::cell::RefCell;
use std::ops::Bound;
use std::sync::Arc;

use crate::serdes::{Serde, SharedSerde, short_type_name};
use crate::state::{
    InMemorySessionStore, InMemoryWindowStore, KeyValueStore, SessionStore, StateStore, StoreError,
    WindowStore,
};

use super::collector::{OutputKind, OutputRecord};
use super::context::Frame;
use super::error::{KeyOrValue, ProcessorError};
use super::record::NO_HEADERS;
use super::task::TaskId;

/// The kind of a state store. A typed handle checks it when it is made
/// (a window store cannot be opened through `key_value_store`).
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

/// What a [`StoreProvider`] is asked to open.
#[derive(Clone, Copy, Debug)]
pub struct StoreSpec<'a> {
    /// The store's name, unique within the topology.
    pub name: &'a str,
    /// The store's kind.
    pub kind: StoreKind,
    /// The retention of a window or session store; `None` for a key-value
    /// store.
    pub retention: Option<Retention>,
    /// The changelog topic, when the store is logged.
    pub changelog_topic: Option<&'a str>,
}

/// Opens the backends of a task's stores: in-memory in the test driver,
/// RocksDB in the runtime.
///
/// `window_store` and `session_store` default to in-memory stores with the
/// retention of [`StoreSpec::kind`], so a closure that only opens key-value
/// stores still runs windowed topologies; a persistent provider overrides them.
pub trait StoreProvider {
    /// Opens (or creates) the key-value store `spec` for task `task`.
    fn key_value_store(
        &mut self,
        task: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Box<dyn KeyValueStore>, StoreError>;

    /// Opens (or creates) the window store `spec` for task `task`.
    fn window_store(
        &mut self,
        task: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Box<dyn WindowStore>, StoreError> {
        let _ = task;
        let (retention_ms, segment_interval_ms) = spec.retention()?;
        Ok(Box::new(InMemoryWindowStore::new(
            spec.name,
            retention_ms,
            segment_interval_ms,
        )?))
    }

    /// Opens (or creates) the session store `spec` for task `task`.
    fn session_store(
        &mut self,
        task: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Box<dyn SessionStore>, StoreError> {
        let _ = task;
        let (retention_ms, segment_interval_ms) = spec.retention()?;
        Ok(Box::new(InMemorySessionStore::new(
            spec.name,
            retention_ms,
            segment_interval_ms,
        )?))
    }
}

impl StoreSpec<'_> {
    /// `(retention_ms, segment_interval_ms)` of a window or session store;
    /// an error naming the store for a key-value spec.
    pub fn retention(&self) -> Result<(i64, i64), StoreError> {
        match self.retention {
            Some(r) => Ok((r.retention_ms, r.segment_interval_ms)),
            None => Err(StoreError::InvalidState {
                store: self.name.to_owned(),
                message: format!(
                    "is a {} store and has no retention; open it with \
                     StoreProvider::key_value_store",
                    self.kind
                ),
            }),
        }
    }
}

/// The backend of one store, by kind.
pub(crate) enum AnyStore {
    KeyValue(Box<dyn KeyValueStore>),
    Window(Box<dyn WindowStore>),
    Session(Box<dyn SessionStore>),
}

impl AnyStore {
    /// Opens store `spec` of `task` through `provider`, by kind.
    pub(crate) fn open(
        provider: &mut dyn StoreProvider,
        task: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Self, StoreError> {
        Ok(match spec.kind {
            StoreKind::KeyValue => AnyStore::KeyValue(provider.key_value_store(task, spec)?),
            StoreKind::Window => AnyStore::Window(provider.window_store(task, spec)?),
            StoreKind::Session => AnyStore::Session(provider.session_store(task, spec)?),
        })
    }

    pub(crate) fn state(&self) -> &dyn StateStore {
        match self {
            AnyStore::KeyValue(s) => s.as_ref(),
            AnyStore::Window(s) => s.as_ref(),
            AnyStore::Session(s) => s.as_ref(),
        }
    }

    pub(crate) fn state_mut(&mut self) -> &mut dyn StateStore {
        match self {
            AnyStore::KeyValue(s) => s.as_mut(),
            AnyStore::Window(s) => s.as_mut(),
            AnyStore::Session(s) => s.as_mut(),
        }
    }

    pub(crate) fn kind(&self) -> StoreKind {
        match self {
            AnyStore::KeyValue(_) => StoreKind::KeyValue,
            AnyStore::Window(_) => StoreKind::Window,
            AnyStore::Session(_) => StoreKind::Session,
        }
    }

    /// Applies one changelog record (unlogged): `value == None` deletes.
    pub(crate) fn restore(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        let corrupt = |store: &str, what: &str| StoreError::Corrupt {
            store: store.to_owned(),
            message: format!(
                "changelog key of {} bytes is too short for a {what} key; is this the \
                 changelog of a {what} store?",
                key.len()
            ),
        };
        match self {
            AnyStore::KeyValue(s) => match value {
                Some(v) => s.put(key, v),
                None => s.delete(key).map(|_| ()),
            },
            AnyStore::Window(s) => {
                let (k, start) = crate::state::window::split_changelog_key(key)
                    .ok_or_else(|| corrupt(s.name(), "window"))?;
                s.put(k, start, value)
            }
            AnyStore::Session(s) => {
                let session = crate::state::session::parse_changelog_key(key)
                    .ok_or_else(|| corrupt(s.name(), "session"))?;
                match value {
                    Some(v) => s.put(&session, v),
                    None => s.remove(&session),
                }
            }
        }
    }
}

/// Any closure `(task, spec) -> store` is a provider.
impl<F> StoreProvider for F
where
    F: FnMut(TaskId, &StoreSpec<'_>) -> Result<Box<dyn KeyValueStore>, StoreError>,
{
    fn key_value_store(
        &mut self,
        task: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Box<dyn KeyValueStore>, StoreError> {
        self(task, spec)
    }
}

/// The serdes and type names of a store, as recorded in the topology.
#[derive(Clone)]
pub(crate) struct StoreSerdes {
    pub(crate) key: Arc<dyn Any + Send + Sync>,
    pub(crate) value: Arc<dyn Any + Send + Sync>,
    pub(crate) key_type: &'static str,
    pub(crate) value_type: &'static str,
}

impl StoreSerdes {
    pub(crate) fn new<K: 'static, V: 'static>(key: SharedSerde<K>, value: SharedSerde<V>) -> Self {
        StoreSerdes {
            key: Arc::new(key),
            value: Arc::new(value),
            key_type: short_type_name::<K>(),
            value_type: short_type_name::<V>(),
        }
    }

    /// The serdes as `K`/`V`; a [`ProcessorError::StoreType`] naming
    /// `store` when it holds other types.
    pub(crate) fn typed<K: 'static, V: 'static>(
        &self,
        store: &str,
    ) -> Result<(&dyn Serde<K>, &dyn Serde<V>), ProcessorError> {
        let k = self.key.downcast_ref::<SharedSerde<K>>();
        let v = self.value.downcast_ref::<SharedSerde<V>>();
        match (k, v) {
            (Some(k), Some(v)) => Ok((k.as_ref(), v.as_ref())),
            _ => Err(ProcessorError::StoreType {
                store: store.to_owned(),
                actual_key: self.key_type,
                actual_value: self.value_type,
                asked_key: short_type_name::<K>(),
                asked_value: short_type_name::<V>(),
            }),
        }
    }
}

/// A store as a task owns it.
pub(crate) struct StoreSlot {
    pub(crate) name: String,
    pub(crate) changelog_topic: Option<String>,
    pub(crate) serdes: StoreSerdes,
    pub(crate) inner: RefCell<StoreCell>,
}

pub(crate) struct StoreCell {
    pub(crate) store: AnyStore,
    pub(crate) key_buf: Vec<u8>,
    pub(crate) value_buf: Vec<u8>,
}

impl StoreCell {
    pub(crate) fn new(store: AnyStore) -> Self {
        StoreCell {
            store,
            key_buf: Vec::new(),
            value_buf: Vec::new(),
        }
    }
}

/// The typed layer under every store handle (key-value here, window and
/// session in `windowed.rs`): one store of the task with its serdes, checked
/// once against the kind and types asked for. It encodes keys and values
/// (errors name the store), decodes what the backend returns, and logs
/// writes (see the module docs).
pub(crate) struct TypedStore<'a, K, V> {
    frame: &'a Frame<'a>,
    slot: &'a StoreSlot,
    key_serde: &'a dyn Serde<K>,
    value_serde: &'a dyn Serde<V>,
}

impl<K, V> Clone for TypedStore<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for TypedStore<'_, K, V> {}

impl<'a, K: 'static, V: 'static> TypedStore<'a, K, V> {
    /// The typed view of `slot`; fails unless the store is of `kind` and
    /// holds `K`/`V`.
    pub(crate) fn new(
        frame: &'a Frame<'a>,
        slot: &'a StoreSlot,
        kind: StoreKind,
    ) -> Result<Self, ProcessorError> {
        let actual = slot.cell()?.store.kind();
        if actual != kind {
            return Err(ProcessorError::StoreKind {
                store: slot.name.clone(),
                actual,
                asked: kind,
            });
        }
        let (key_serde, value_serde) = slot.serdes.typed::<K, V>(&slot.name)?;
        Ok(TypedStore {
            frame,
            slot,
            key_serde,
            value_serde,
        })
    }

    /// The store's name.
    pub(crate) fn name(&self) -> &'a str {
        &self.slot.name
    }

    /// The store, borrowed for one operation.
    pub(crate) fn cell(&self) -> Result<std::cell::RefMut<'a, StoreCell>, ProcessorError> {
        self.slot.cell()
    }

    /// Serializes `key` into `out` (cleared first).
    pub(crate) fn encode_key_into(&self, key: &K, out: &mut Vec<u8>) -> Result<(), ProcessorError> {
        out.clear();
        self.key_serde
            .serialize(&self.slot.name, key, out)
            .map_err(ProcessorError::serialize(KeyOrValue::Key, &self.slot.name))
    }

    /// Serializes `value` into `out` (cleared first).
    pub(crate) fn encode_value_into(
        &self,
        value: &V,
        out: &mut Vec<u8>,
    ) -> Result<(), ProcessorError> {
        out.clear();
        self.value_serde
            .serialize(&self.slot.name, value, out)
            .map_err(ProcessorError::serialize(
                KeyOrValue::Value,
                &self.slot.name,
            ))
    }

    /// `key`, serialized.
    pub(crate) fn encode_key(&self, key: &K) -> Result<Vec<u8>, ProcessorError> {
        let mut out = Vec::new();
        self.encode_key_into(key, &mut out)?;
        Ok(out)
    }

    /// `value`, serialized.
    pub(crate) fn encode_value(&self, value: &V) -> Result<Vec<u8>, ProcessorError> {
        let mut out = Vec::new();
        self.encode_value_into(value, &mut out)?;
        Ok(out)
    }

    /// A key read from the store.
    pub(crate) fn decode_key(&self, bytes: &[u8]) -> Result<K, ProcessorError> {
        self.key_serde
            .deserialize(&self.slot.name, bytes)
            .map_err(ProcessorError::store_read(KeyOrValue::Key, &self.slot.name))
    }

    /// A value read from the store.
    pub(crate) fn decode_value(&self, bytes: &[u8]) -> Result<V, ProcessorError> {
        self.value_serde
            .deserialize(&self.slot.name, bytes)
            .map_err(ProcessorError::store_read(
                KeyOrValue::Value,
                &self.slot.name,
            ))
    }

    /// Emits the changelog record of a write (`changelog_key` as the store's
    /// changelog encodes it; `None` value = tombstone).
    pub(crate) fn log(
        &self,
        changelog_key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), ProcessorError> {
        self.slot.log(self.frame, changelog_key, value)
    }
}

/// A typed handle to one key-value store of the task, obtained from
/// [`super::ProcessorContext::key_value_store`]. Writes are logged (see the
/// module docs).
pub struct KeyValueStoreHandle<'a, K, V>(TypedStore<'a, K, V>);

impl<K, V> Clone for KeyValueStoreHandle<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for KeyValueStoreHandle<'_, K, V> {}

fn key_value_store(cell: &mut StoreCell) -> &mut dyn KeyValueStore {
    match &mut cell.store {
        AnyStore::KeyValue(s) => s.as_mut(),
        _ => unreachable!("the kind was checked when the handle was made"),
    }
}

impl<'a, K: 'static, V: 'static> KeyValueStoreHandle<'a, K, V> {
    pub(crate) fn new(frame: &'a Frame<'a>, slot: &'a StoreSlot) -> Result<Self, ProcessorError> {
        TypedStore::new(frame, slot, StoreKind::KeyValue).map(KeyValueStoreHandle)
    }

    /// The store's name.
    pub fn name(&self) -> &'a str {
        self.0.name()
    }

    /// The value stored for `key`.
    pub fn get(&self, key: &K) -> Result<Option<V>, ProcessorError> {
        let mut cell = self.0.cell()?;
        let cell = &mut *cell;
        let mut key_buf = std::mem::take(&mut cell.key_buf);
        let found = self
            .0
            .encode_key_into(key, &mut key_buf)
            .and_then(|()| Ok(key_value_store(cell).get(&key_buf)?));
        cell.key_buf = key_buf;
        match found? {
            Some(bytes) => self.0.decode_value(&bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Sets `key` to `value` and logs the write.
    pub fn put(&self, key: &K, value: &V) -> Result<(), ProcessorError> {
        let mut cell = self.0.cell()?;
        let cell = &mut *cell;
        let (mut key_buf, mut value_buf) = (
            std::mem::take(&mut cell.key_buf),
            std::mem::take(&mut cell.value_buf),
        );
        let result = self
            .0
            .encode_key_into(key, &mut key_buf)
            .and_then(|()| self.0.encode_value_into(value, &mut value_buf))
            .and_then(|()| Ok(key_value_store(cell).put(&key_buf, &value_buf)?))
            .and_then(|()| self.0.log(&key_buf, Some(&value_buf)));
        (cell.key_buf, cell.value_buf) = (key_buf, value_buf);
        result
    }

    /// Removes `key`, logs a tombstone, and returns the value it had.
    pub fn delete(&self, key: &K) -> Result<Option<V>, ProcessorError> {
        let mut cell = self.0.cell()?;
        let cell = &mut *cell;
        let mut key_buf = std::mem::take(&mut cell.key_buf);
        let old = self
            .0
            .encode_key_into(key, &mut key_buf)
            .and_then(|()| Ok(key_value_store(cell).delete(&key_buf)?))
            .and_then(|old| self.0.log(&key_buf, None).map(|()| old));
        cell.key_buf = key_buf;
        old?.map(|bytes| self.0.decode_value(&bytes)).transpose()
    }

    /// All entries in key (byte) order, decoded. Reads the whole store; meant
    /// for punctuators over small stores and for tests.
    pub fn all(&self) -> Result<Vec<(K, V)>, ProcessorError> {
        self.scan(Bound::Unbounded, Bound::Unbounded)
    }

    /// The entries whose encoded keys lie in `[from, to)`, in key (byte)
    /// order, decoded. `None` leaves that end open.
    pub fn range(&self, from: Option<&K>, to: Option<&K>) -> Result<Vec<(K, V)>, ProcessorError> {
        let from = from.map(|k| self.0.encode_key(k)).transpose()?;
        let to = to.map(|k| self.0.encode_key(k)).transpose()?;
        self.scan(
            from.as_deref().map_or(Bound::Unbounded, Bound::Included),
            to.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
        )
    }

    fn scan(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<Vec<(K, V)>, ProcessorError> {
        let mut cell = self.0.cell()?;
        let mut out = Vec::new();
        for entry in key_value_store(&mut cell).range(from, to)? {
            let (k, v) = entry?;
            out.push((self.0.decode_key(&k)?, self.0.decode_value(&v)?));
        }
        Ok(out)
    }

    /// An estimate of the number of entries.
    pub fn approximate_num_entries(&self) -> Result<u64, ProcessorError> {
        Ok(key_value_store(&mut *self.0.cell()?).approximate_num_entries()?)
    }
}

impl StoreSlot {
    pub(crate) fn cell(&self) -> Result<std::cell::RefMut<'_, StoreCell>, ProcessorError> {
        self.inner
            .try_borrow_mut()
            .map_err(|_| ProcessorError::StoreBusy(self.name.clone()))
    }

    /// Emits the changelog record of a write (see the module docs).
    pub(crate) fn log(
        &self,
        frame: &Frame<'_>,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), ProcessorError> {
        let Some(topic) = &self.changelog_topic else {
            return Ok(());
        };
        frame.collector.borrow_mut().send(OutputRecord {
            topic,
            partition: Some(frame.task.partition),
            key: Some(key),
            value,
            timestamp: frame.current_timestamp.get(),
            headers: &NO_HEADERS,
            kind: OutputKind::Changelog,
        })?;
        Ok(())
    }
}
