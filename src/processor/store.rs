//! The stores of a task: how they are opened and owned.
//!
//! The task owns each store as a [`StoreSlot`]: the byte-level backend (from
//! the [`StoreProvider`]; key-value, window or session, see [`StoreKind`]),
//! the store's serdes, reusable key/value buffers, and the changelog topic
//! when logging is on. Processors reach a store through the typed handles
//! of `typed.rs` (key-value) and `windowed.rs` (window, session), which
//! also log every write.

use std::any::Any;
use std::cell::RefCell;
use std::sync::Arc;

use crate::serdes::{Serde, SharedSerde, short_type_name};
use crate::state::{
    InMemorySessionStore, InMemoryWindowStore, KeyValueStore, SessionStore, StateStore, StoreError,
    WindowStore,
};

use super::error::ProcessorError;
use super::task::TaskId;

pub use crate::state::{Retention, StoreKind};

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

impl StoreSlot {
    pub(crate) fn cell(&self) -> Result<std::cell::RefMut<'_, StoreCell>, ProcessorError> {
        self.inner
            .try_borrow_mut()
            .map_err(|_| ProcessorError::StoreBusy(self.name.clone()))
    }
}
