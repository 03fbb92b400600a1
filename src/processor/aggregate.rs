//! The node behind `count`, `reduce` and `aggregate` on a grouped stream,
//! with the record cache.
//!
//! For every input record the node computes the key's new aggregate from the
//! current one. Without caching it reads the store, writes the new value
//! (which logs a changelog record) and forwards `Change { new, old }` at
//! once. With caching (a non-zero [`CacheBudget`](crate::state::CacheBudget)
//! and a store no other processor reads) the current aggregate of a key
//! updated since the last flush lives in the node's cache instead: further
//! updates of that key change only the cache, and at
//! [`TaskInstance::flush`](super::TaskInstance::flush) (before every commit)
//! or when the instance's budget is full, each held key is written to the
//! store once and forwarded once, as `Change { new, old }` with `old` the
//! value as of the previous flush and the timestamp and headers of the
//! key's latest update — Kafka Streams' caching, which collapses the
//! downstream and changelog records of a commit interval to one per key.
//!
//! A store read by another processor (a join reading the table) is not
//! cached, so readers never miss an update that is only in the cache.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::serdes::SharedSerde;
use crate::state::CacheBudget;

use super::context::{Frame, ProcessorContext};
use super::error::{KeyOrValue, ProcessorError};
use super::node::{ErasedNode, take_record};
use super::record::{Change, Headers, Record};

/// Bytes charged per cached key on top of its serialized id (the entry,
/// its map node and the two aggregates; an estimate, as aggregates are not
/// serialized until the flush).
fn entry_bytes<T, A>(id_bytes: usize) -> u64 {
    (id_bytes
        + crate::state::cache::ENTRY_OVERHEAD_BYTES as usize
        + std::mem::size_of::<(Vec<u8>, Held<T, A>)>()) as u64
}

/// The latest update of one key (or window) held back since the last flush.
pub(crate) struct Held<T, A> {
    /// The key as the node forwards it (a key, or a windowed key).
    pub(crate) key: T,
    /// The current aggregate (always `Some` between calls).
    pub(crate) value: Option<A>,
    /// The value as of the previous flush (what the store holds).
    pub(crate) old: Option<A>,
    pub(crate) timestamp: i64,
    pub(crate) headers: Headers,
}

/// The held updates of one caching node, charged to the instance's budget.
/// Ids are the serialized store key (plus window start), so a flush runs in
/// store order.
pub(crate) struct UpdateCache<T, A> {
    budget: Option<Arc<CacheBudget>>,
    entries: BTreeMap<Vec<u8>, Held<T, A>>,
    /// Bytes charged to the budget for `entries`.
    charged: u64,
}

impl<T, A> Default for UpdateCache<T, A> {
    fn default() -> Self {
        UpdateCache {
            budget: None,
            entries: BTreeMap::new(),
            charged: 0,
        }
    }
}

impl<T, A> UpdateCache<T, A> {
    /// Turns caching on with the instance's budget (`None`: off).
    pub(crate) fn set_budget(&mut self, budget: Option<Arc<CacheBudget>>) {
        self.budget = budget;
    }

    pub(crate) fn enabled(&self) -> bool {
        self.budget.is_some()
    }

    pub(crate) fn get_mut(&mut self, id: &[u8]) -> Option<&mut Held<T, A>> {
        self.entries.get_mut(id)
    }

    /// Holds `entry`; returns whether the budget is now full (flush then).
    pub(crate) fn insert(&mut self, id: Vec<u8>, entry: Held<T, A>) -> bool {
        let bytes = entry_bytes::<T, A>(id.len());
        self.entries.insert(id, entry);
        self.charged += bytes;
        self.budget.as_ref().is_some_and(|b| b.charge(bytes))
    }

    /// Takes every held update, in id order, and releases their bytes.
    pub(crate) fn take(&mut self) -> BTreeMap<Vec<u8>, Held<T, A>> {
        self.release();
        std::mem::take(&mut self.entries)
    }

    /// Drops every held update (the task aborted or closes).
    pub(crate) fn discard(&mut self) {
        self.release();
        self.entries.clear();
    }

    fn release(&mut self) {
        if let Some(budget) = &self.budget {
            budget.release(self.charged);
        }
        self.charged = 0;
    }
}

impl<T, A> Drop for UpdateCache<T, A> {
    fn drop(&mut self) {
        self.release();
    }
}

/// The aggregation function: `(key, value, current aggregate) → new aggregate`.
pub(crate) type AggregateFn<K, V, A> = Arc<dyn Fn(&K, V, Option<A>) -> A + Send + Sync>;

/// See the module docs.
pub(crate) struct AggregateNode<K, V, A> {
    store: String,
    key_serde: SharedSerde<K>,
    f: AggregateFn<K, V, A>,
    cache: UpdateCache<K, A>,
    key_buf: Vec<u8>,
}

impl<K: Clone + Send + 'static, V: 'static, A: Clone + Send + 'static> AggregateNode<K, V, A> {
    pub(crate) fn boxed(
        store: String,
        key_serde: SharedSerde<K>,
        f: AggregateFn<K, V, A>,
    ) -> Box<dyn ErasedNode> {
        Box::new(AggregateNode {
            store,
            key_serde,
            f,
            cache: UpdateCache::default(),
            key_buf: Vec::new(),
        })
    }

    fn process_record<'a>(
        &mut self,
        frame: &'a Frame<'a>,
        node: usize,
        r: Record<K, V>,
    ) -> Result<(), ProcessorError> {
        let ctx = ProcessorContext::<K, Change<A>>::new(frame, node);
        let kv = ctx.key_value_store::<K, A>(&self.store)?;
        if !self.cache.enabled() {
            let old = kv.get(&r.key)?;
            let new = (self.f)(&r.key, r.value, old.clone());
            kv.put(&r.key, &new)?;
            return ctx.forward(Record {
                key: r.key,
                value: Change {
                    new: Some(new),
                    old,
                },
                timestamp: r.timestamp,
                headers: r.headers,
            });
        }
        self.key_buf.clear();
        self.key_serde
            .serialize(&self.store, &r.key, &mut self.key_buf)
            .map_err(|source| ProcessorError::Serialize {
                what: KeyOrValue::Key,
                target: self.store.clone(),
                source,
            })?;
        if let Some(e) = self.cache.get_mut(self.key_buf.as_slice()) {
            let current = e.value.take();
            e.value = Some((self.f)(&r.key, r.value, current));
            e.timestamp = r.timestamp;
            e.headers = r.headers;
            return Ok(());
        }
        let old = kv.get(&r.key)?;
        let new = (self.f)(&r.key, r.value, old.clone());
        let full = self.cache.insert(
            self.key_buf.clone(),
            Held {
                key: r.key,
                value: Some(new),
                old,
                timestamp: r.timestamp,
                headers: r.headers,
            },
        );
        if full {
            self.flush_cache(frame, node)?;
        }
        Ok(())
    }

    /// Writes and forwards every held key, in key order, and empties the cache.
    fn flush_cache<'a>(&mut self, frame: &'a Frame<'a>, node: usize) -> Result<(), ProcessorError> {
        let entries = self.cache.take();
        if entries.is_empty() {
            return Ok(());
        }
        let ctx = ProcessorContext::<K, Change<A>>::new(frame, node);
        let kv = ctx.key_value_store::<K, A>(&self.store)?;
        let previous = frame.current_timestamp.get();
        let mut result = Ok(());
        for e in entries.into_values() {
            let new = e.value.expect("a held entry has a value");
            // The changelog record carries the latest update's timestamp.
            frame.current_timestamp.set(e.timestamp);
            result = kv.put(&e.key, &new).and_then(|()| {
                ctx.forward(Record {
                    key: e.key,
                    value: Change {
                        new: Some(new),
                        old: e.old,
                    },
                    timestamp: e.timestamp,
                    headers: e.headers,
                })
            });
            if result.is_err() {
                break;
            }
        }
        frame.current_timestamp.set(previous);
        result
    }
}

impl<K: Clone + Send + 'static, V: 'static, A: Clone + Send + 'static> ErasedNode
    for AggregateNode<K, V, A>
{
    fn init<'a>(&mut self, frame: &'a Frame<'a>, node: usize) -> Result<(), ProcessorError> {
        let ctx = ProcessorContext::<K, Change<A>>::new(frame, node);
        self.cache.set_budget(ctx.cache_budget_for(&self.store));
        Ok(())
    }

    fn process<'a>(
        &mut self,
        frame: &'a Frame<'a>,
        node: usize,
        input: &mut dyn Any,
    ) -> Result<(), ProcessorError> {
        let record = take_record::<K, V>(frame, node, input)?;
        let previous = frame.current_timestamp.replace(record.timestamp);
        let result = self.process_record(frame, node, record);
        frame.current_timestamp.set(previous);
        result
    }

    fn flush<'a>(&mut self, frame: &'a Frame<'a>, node: usize) -> Result<(), ProcessorError> {
        self.flush_cache(frame, node)
    }

    fn discard(&mut self) {
        self.cache.discard();
    }

    fn close(&mut self) {
        self.discard();
    }
}
