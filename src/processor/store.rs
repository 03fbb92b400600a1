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

/// The kind of a state store, with the retention of time-based kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreKind {
    /// A key-value store.
    KeyValue,
    /// A window store ([`WindowStore`]): windows are kept `retention_ms`
    /// after their start, in segments of `segment_interval_ms`.
    Window {
        /// How long a window is kept after its start (ms).
        retention_ms: i64,
        /// Width of one store segment (ms).
        segment_interval_ms: i64,
    },
    /// A session store ([`SessionStore`]): sessions are kept `retention_ms`
    /// after their end, in segments of `segment_interval_ms`.
    Session {
        /// How long a session is kept after its end (ms).
        retention_ms: i64,
        /// Width of one store segment (ms).
        segment_interval_ms: i64,
    },
}

impl StoreKind {
    /// `"key-value"`, `"window"` or `"session"`.
    pub fn label(&self) -> &'static str {
        match self {
            StoreKind::KeyValue => "key-value",
            StoreKind::Window { .. } => "window",
            StoreKind::Session { .. } => "session",
        }
    }
}

/// What a [`StoreProvider`] is asked to open.
#[derive(Clone, Copy, Debug)]
pub struct StoreSpec<'a> {
    /// The store's name, unique within the topology.
    pub name: &'a str,
    /// The store's kind.
    pub kind: StoreKind,
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
        match self.kind {
            StoreKind::Window {
                retention_ms,
                segment_interval_ms,
            }
            | StoreKind::Session {
                retention_ms,
                segment_interval_ms,
            } => Ok((retention_ms, segment_interval_ms)),
            StoreKind::KeyValue => Err(StoreError::InvalidState {
                store: self.name.to_owned(),
                message: "is a key-value store and has no retention; open it with \
                          StoreProvider::key_value_store"
                    .to_owned(),
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
            StoreKind::Window { .. } => AnyStore::Window(provider.window_store(task, spec)?),
            StoreKind::Session { .. } => AnyStore::Session(provider.session_store(task, spec)?),
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

    pub(crate) fn label(&self) -> &'static str {
        match self {
            AnyStore::KeyValue(_) => "key-value",
            AnyStore::Window(_) => "window",
            AnyStore::Session(_) => "session",
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

    pub(crate) fn typed<K: 'static, V: 'static>(&self) -> Option<(&dyn Serde<K>, &dyn Serde<V>)> {
        let k = self.key.downcast_ref::<SharedSerde<K>>()?;
        let v = self.value.downcast_ref::<SharedSerde<V>>()?;
        Some((k.as_ref(), v.as_ref()))
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

/// A typed handle to one key-value store of the task, obtained from
/// [`super::ProcessorContext::key_value_store`]. Writes are logged (see the
/// module docs).
pub struct KeyValueStoreHandle<'a, K, V> {
    frame: &'a Frame<'a>,
    slot: &'a StoreSlot,
    key_serde: &'a dyn Serde<K>,
    value_serde: &'a dyn Serde<V>,
}

impl<K, V> Clone for KeyValueStoreHandle<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for KeyValueStoreHandle<'_, K, V> {}

impl<'a, K: 'static, V: 'static> KeyValueStoreHandle<'a, K, V> {
    pub(crate) fn new(frame: &'a Frame<'a>, slot: &'a StoreSlot) -> Result<Self, ProcessorError> {
        slot.expect_kind("key-value")?;
        let Some((key_serde, value_serde)) = slot.serdes.typed::<K, V>() else {
            return Err(ProcessorError::StoreType {
                store: slot.name.clone(),
                actual_key: slot.serdes.key_type,
                actual_value: slot.serdes.value_type,
                asked_key: short_type_name::<K>(),
                asked_value: short_type_name::<V>(),
            });
        };
        Ok(KeyValueStoreHandle {
            frame,
            slot,
            key_serde,
            value_serde,
        })
    }

    /// The store's name.
    pub fn name(&self) -> &'a str {
        &self.slot.name
    }

    fn cell(&self) -> Result<std::cell::RefMut<'a, StoreCell>, ProcessorError> {
        self.slot.cell()
    }

    fn kv(cell: &mut StoreCell) -> &mut dyn KeyValueStore {
        match &mut cell.store {
            AnyStore::KeyValue(s) => s.as_mut(),
            _ => unreachable!("the kind was checked when the handle was made"),
        }
    }

    fn encode_key(&self, cell: &mut StoreCell, key: &K) -> Result<(), ProcessorError> {
        cell.key_buf.clear();
        self.key_serde
            .serialize(&self.slot.name, key, &mut cell.key_buf)
            .map_err(|source| ProcessorError::Serialize {
                what: KeyOrValue::Key,
                target: self.slot.name.clone(),
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

    /// The value stored for `key`.
    pub fn get(&self, key: &K) -> Result<Option<V>, ProcessorError> {
        let mut cell = self.cell()?;
        self.encode_key(&mut cell, key)?;
        let cell = &mut *cell;
        let key = std::mem::take(&mut cell.key_buf);
        let found = Self::kv(cell).get(&key);
        cell.key_buf = key;
        match found? {
            Some(bytes) => self.decode_value(&bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Sets `key` to `value` and logs the write.
    pub fn put(&self, key: &K, value: &V) -> Result<(), ProcessorError> {
        let mut cell = self.cell()?;
        self.encode_key(&mut cell, key)?;
        let cell = &mut *cell;
        cell.value_buf.clear();
        self.value_serde
            .serialize(&self.slot.name, value, &mut cell.value_buf)
            .map_err(|source| ProcessorError::Serialize {
                what: KeyOrValue::Value,
                target: self.slot.name.clone(),
                source,
            })?;
        let (key, value) = (
            std::mem::take(&mut cell.key_buf),
            std::mem::take(&mut cell.value_buf),
        );
        let result = Self::kv(cell)
            .put(&key, &value)
            .map_err(ProcessorError::from)
            .and_then(|()| self.slot.log(self.frame, &key, Some(&value)));
        (cell.key_buf, cell.value_buf) = (key, value);
        result
    }

    /// Removes `key`, logs a tombstone, and returns the value it had.
    pub fn delete(&self, key: &K) -> Result<Option<V>, ProcessorError> {
        let mut cell = self.cell()?;
        self.encode_key(&mut cell, key)?;
        let cell = &mut *cell;
        let key = std::mem::take(&mut cell.key_buf);
        let old = Self::kv(cell).delete(&key);
        let logged = old.is_ok().then(|| self.slot.log(self.frame, &key, None));
        cell.key_buf = key;
        let old = old?;
        logged.transpose()?;
        old.map(|bytes| self.decode_value(&bytes)).transpose()
    }

    /// All entries in key (byte) order, decoded. Reads the whole store; meant
    /// for punctuators over small stores and for tests.
    pub fn all(&self) -> Result<Vec<(K, V)>, ProcessorError> {
        self.scan(Bound::Unbounded, Bound::Unbounded)
    }

    /// The entries whose encoded keys lie in `[from, to)`, in key (byte)
    /// order, decoded. `None` leaves that end open.
    pub fn range(&self, from: Option<&K>, to: Option<&K>) -> Result<Vec<(K, V)>, ProcessorError> {
        let encode = |key: Option<&K>| -> Result<Option<Vec<u8>>, ProcessorError> {
            let Some(key) = key else { return Ok(None) };
            let mut out = Vec::new();
            self.key_serde
                .serialize(&self.slot.name, key, &mut out)
                .map_err(|source| ProcessorError::Serialize {
                    what: KeyOrValue::Key,
                    target: self.slot.name.clone(),
                    source,
                })?;
            Ok(Some(out))
        };
        let (from, to) = (encode(from)?, encode(to)?);
        self.scan(
            from.as_deref().map_or(Bound::Unbounded, Bound::Included),
            to.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
        )
    }

    fn scan(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<Vec<(K, V)>, ProcessorError> {
        let mut cell = self.cell()?;
        let mut out = Vec::new();
        for entry in Self::kv(&mut cell).range(from, to)? {
            let (k, v) = entry?;
            let key = self
                .key_serde
                .deserialize(&self.slot.name, &k)
                .map_err(|source| ProcessorError::StoreRead {
                    what: KeyOrValue::Key,
                    store: self.slot.name.clone(),
                    source,
                })?;
            out.push((key, self.decode_value(&v)?));
        }
        Ok(out)
    }

    /// An estimate of the number of entries.
    pub fn approximate_num_entries(&self) -> Result<u64, ProcessorError> {
        Ok(Self::kv(&mut *self.cell()?).approximate_num_entries()?)
    }
}

impl StoreSlot {
    pub(crate) fn cell(&self) -> Result<std::cell::RefMut<'_, StoreCell>, ProcessorError> {
        self.inner
            .try_borrow_mut()
            .map_err(|_| ProcessorError::StoreBusy(self.name.clone()))
    }

    /// Fails unless the store is of kind `label` ("key-value", "window", "session").
    pub(crate) fn expect_kind(&self, label: &'static str) -> Result<(), ProcessorError> {
        let actual = self.cell()?.store.label();
        if actual == label {
            Ok(())
        } else {
            Err(ProcessorError::StoreKind {
                store: self.name.clone(),
                actual,
                asked: label,
            })
        }
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
