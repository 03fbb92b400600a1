//! The typed store layer and the key-value store handle.
//!
//! [`TypedStore`] is one store of the task seen with its serdes, checked
//! once against the kind and types a processor asked for; the key-value
//! handle here and the window and session handles (`windowed.rs`) are thin
//! wrappers over it.
//!
//! # The logging layer
//!
//! Every `put`/`delete` through a handle first writes the backend (into its
//! open, uncommitted writes) and then emits the changelog record — topic
//! `<application_id>-<store>-changelog`, partition = the task's partition,
//! the serialized key (window and session stores: their changelog key), the
//! value or a tombstone, the timestamp of the record being processed —
//! through the call's [`super::RecordCollector`], so the runtime sends it in
//! the same transaction as the outputs. Restoration writes the backend
//! directly and logs nothing.

use std::ops::Bound;

use crate::serdes::Serde;
use crate::state::{KeyValueStore, StoreKind};

use super::collector::{OutputKind, OutputRecord};
use super::error::{KeyOrValue, ProcessorError};
use super::frame::Frame;
use super::record::NO_HEADERS;
use super::store::{AnyStore, StoreCell, StoreSlot};

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

    /// Emits the changelog record of a write (see the module docs):
    /// `changelog_key` as the store's changelog encodes it, `None` value =
    /// tombstone.
    pub(crate) fn log(
        &self,
        changelog_key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), ProcessorError> {
        let Some(topic) = &self.slot.changelog_topic else {
            return Ok(());
        };
        let frame = self.frame;
        frame.collector.borrow_mut().send(OutputRecord {
            topic,
            partition: Some(frame.task.partition),
            key: Some(changelog_key),
            value,
            timestamp: frame.current_timestamp.get(),
            headers: &NO_HEADERS,
            kind: OutputKind::Changelog,
        })?;
        Ok(())
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
