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

/// Bytes charged per cached key on top of its serialized key (the entry,
/// its map node and the two aggregates; an estimate, as aggregates are not
/// serialized until the flush).
fn entry_bytes<K, A>(key_bytes: usize) -> u64 {
    (key_bytes
        + crate::state::cache::ENTRY_OVERHEAD_BYTES as usize
        + std::mem::size_of::<Entry<K, A>>()) as u64
}

struct Entry<K, A> {
    key: K,
    /// The current aggregate (always `Some` between calls).
    value: Option<A>,
    /// The value as of the previous flush (what the store holds).
    old: Option<A>,
    timestamp: i64,
    headers: Headers,
}

/// The aggregation function: `(key, value, current aggregate) → new aggregate`.
pub(crate) type AggregateFn<K, V, A> = Arc<dyn Fn(&K, V, Option<A>) -> A + Send + Sync>;

/// See the module docs.
pub(crate) struct AggregateNode<K, V, A> {
    store: String,
    key_serde: SharedSerde<K>,
    f: AggregateFn<K, V, A>,
    /// Set at `init`: the instance's budget, when this node caches.
    budget: Option<Arc<CacheBudget>>,
    cache: BTreeMap<Vec<u8>, Entry<K, A>>,
    /// Bytes charged to the budget for `cache`.
    held: u64,
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
            budget: None,
            cache: BTreeMap::new(),
            held: 0,
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
        let Some(budget) = self.budget.clone() else {
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
        };
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
        let bytes = entry_bytes::<K, A>(self.key_buf.len());
        self.cache.insert(
            self.key_buf.clone(),
            Entry {
                key: r.key,
                value: Some(new),
                old,
                timestamp: r.timestamp,
                headers: r.headers,
            },
        );
        self.held += bytes;
        if budget.charge(bytes) {
            self.flush_cache(frame, node)?;
        }
        Ok(())
    }

    /// Writes and forwards every held key, in key order, and empties the cache.
    fn flush_cache<'a>(&mut self, frame: &'a Frame<'a>, node: usize) -> Result<(), ProcessorError> {
        if self.cache.is_empty() {
            return Ok(());
        }
        self.release();
        let entries = std::mem::take(&mut self.cache);
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

    fn release(&mut self) {
        if let Some(budget) = &self.budget {
            budget.release(self.held);
        }
        self.held = 0;
    }
}

impl<K: Clone + Send + 'static, V: 'static, A: Clone + Send + 'static> ErasedNode
    for AggregateNode<K, V, A>
{
    fn init<'a>(&mut self, frame: &'a Frame<'a>, node: usize) -> Result<(), ProcessorError> {
        let store = frame.stores.iter().position(|s| s.name == self.store);
        let shared = store.is_some_and(|store| {
            frame
                .nodes
                .iter()
                .enumerate()
                .any(|(i, n)| i != node && n.stores.contains(&store))
        });
        self.budget = (frame.cache.enabled() && !shared).then(|| frame.cache.clone());
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
        self.release();
        self.cache.clear();
    }

    fn close(&mut self) {
        self.discard();
    }
}

impl<K, V, A> Drop for AggregateNode<K, V, A> {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.release(self.held);
        }
    }
}
