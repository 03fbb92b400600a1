//! Typed, logged access to a task's key-value stores.
//!
//! The task owns each store as a [`StoreSlot`]: the byte-level backend (from
//! the [`StoreProvider`]), the store's serdes, reusable key/value buffers, and
//! the changelog topic when logging is on.
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
use std::sync::Arc;

use crate::serdes::{Serde, SharedSerde, short_type_name};
use crate::state::{KeyValueStore, StoreError};

use super::collector::{OutputKind, OutputRecord};
use super::context::Frame;
use super::error::{KeyOrValue, ProcessorError};
use super::record::NO_HEADERS;
use super::task::TaskId;

/// The kind of a state store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreKind {
    /// A key-value store.
    KeyValue,
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
pub trait StoreProvider {
    /// Opens (or creates) the key-value store `spec` for task `task`.
    fn key_value_store(
        &mut self,
        task: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Box<dyn KeyValueStore>, StoreError>;
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
    pub(crate) store: Box<dyn KeyValueStore>,
    key_buf: Vec<u8>,
    value_buf: Vec<u8>,
}

impl StoreCell {
    pub(crate) fn new(store: Box<dyn KeyValueStore>) -> Self {
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
        self.slot
            .inner
            .try_borrow_mut()
            .map_err(|_| ProcessorError::StoreBusy(self.slot.name.clone()))
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
        match cell.store.get(&cell.key_buf)? {
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
        cell.store.put(&cell.key_buf, &cell.value_buf)?;
        self.log(&cell.key_buf, Some(&cell.value_buf))
    }

    /// Removes `key`, logs a tombstone, and returns the value it had.
    pub fn delete(&self, key: &K) -> Result<Option<V>, ProcessorError> {
        let mut cell = self.cell()?;
        self.encode_key(&mut cell, key)?;
        let cell = &mut *cell;
        let old = cell.store.delete(&cell.key_buf)?;
        self.log(&cell.key_buf, None)?;
        old.map(|bytes| self.decode_value(&bytes)).transpose()
    }

    /// All entries in key (byte) order, decoded. Reads the whole store; meant
    /// for punctuators over small stores and for tests.
    pub fn all(&self) -> Result<Vec<(K, V)>, ProcessorError> {
        let cell = self.cell()?;
        let mut out = Vec::new();
        for entry in cell.store.all()? {
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
        Ok(self.cell()?.store.approximate_num_entries()?)
    }

    fn log(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), ProcessorError> {
        let Some(topic) = &self.slot.changelog_topic else {
            return Ok(());
        };
        self.frame.collector.borrow_mut().send(OutputRecord {
            topic,
            partition: Some(self.frame.task.partition),
            key: Some(key),
            value,
            timestamp: self.frame.current_timestamp.get(),
            headers: &NO_HEADERS,
            kind: OutputKind::Changelog,
        })?;
        Ok(())
    }
}
