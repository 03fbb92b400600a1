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
//! After a commit's flush the cache of a key-value aggregation keeps each
//! key's aggregate, now clean (what the store holds), while the instance's
//! budget allows (a time window's cache empties: its windows close), so a key
//! updated again in the next interval is not read back from the store;
//! clean entries are the first to go when the budget fills, and an abort
//! drops them with the rest, as the store rolls back.
//!
//! A store read by another processor (a join reading the table) is not
//! cached, so readers never miss an update that is only in the cache.

use std::collections::HashMap;
use std::sync::Arc;

use crate::serdes::SharedSerde;
use crate::state::CacheBudget;

use super::Processor;
use super::context::ProcessorContext;
use super::error::{KeyOrValue, ProcessorError};
use super::node::{CacheHooks, CachingNode, ErasedNode};
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
    /// Updated since the last flush (a clean entry holds what the store
    /// holds and is not flushed again).
    pub(crate) dirty: bool,
}

impl<T, A> Held<T, A> {
    /// A held update of a key not in the cache.
    pub(crate) fn new(key: T, value: A, old: Option<A>, timestamp: i64, headers: Headers) -> Self {
        Held {
            key,
            value: Some(value),
            old,
            timestamp,
            headers,
            dirty: true,
        }
    }

    /// Applies `f` to the held aggregate; `timestamp` becomes the latest
    /// update time. When `f` fails the held aggregate stays as it was.
    pub(crate) fn update(
        &mut self,
        timestamp: i64,
        f: impl FnOnce(Option<A>) -> Result<A, StepFailed<A>>,
    ) -> Result<(), ProcessorError> {
        match f(self.value.take()) {
            Ok(value) => {
                self.value = Some(value);
                self.timestamp = timestamp;
                self.dirty = true;
                Ok(())
            }
            Err(failed) => {
                self.value = failed.aggregate;
                Err(failed.error)
            }
        }
    }
}

/// The held updates of one caching node, charged to the instance's budget.
/// Ids are the serialized store key (plus window start); a lookup hashes
/// the id, and a flush sorts the updated ids, so it runs in store order.
pub(crate) struct UpdateCache<T, A> {
    budget: Option<Arc<CacheBudget>>,
    entries: HashMap<Vec<u8>, Held<T, A>>,
    /// Bytes charged to the budget for `entries`.
    charged: u64,
    /// Whether flushed entries stay, clean (a key-value aggregation: its
    /// keys come back). A time window's entries do not: its windows close
    /// and are not updated again.
    keep_flushed: bool,
}

impl<T, A> Default for UpdateCache<T, A> {
    fn default() -> Self {
        UpdateCache {
            budget: None,
            entries: HashMap::new(),
            charged: 0,
            keep_flushed: false,
        }
    }
}

impl<T, A> UpdateCache<T, A> {
    /// A cache whose flushed entries stay, clean, while the budget allows.
    pub(crate) fn keeping_flushed() -> Self {
        let mut cache = Self::default();
        cache.keep_flushed = true;
        cache
    }

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

    /// Holds `entry`; returns whether the budget is still full after this
    /// cache dropped its clean entries (flush then).
    pub(crate) fn insert(&mut self, id: Vec<u8>, entry: Held<T, A>) -> bool {
        let bytes = entry_bytes::<T, A>(id.len());
        self.entries.insert(id, entry);
        self.charged += bytes;
        let Some(budget) = &self.budget else {
            return false;
        };
        if !budget.charge(bytes) {
            return false;
        }
        self.drop_clean();
        self.budget.as_ref().is_some_and(|b| b.over())
    }

    /// Drops every held entry (the task aborted or closes).
    pub(crate) fn discard(&mut self) {
        self.release();
        self.entries.clear();
    }

    /// Drops the clean entries, releasing their charge.
    fn drop_clean(&mut self) {
        let mut freed = 0;
        self.entries.retain(|id, e| {
            if !e.dirty {
                freed += entry_bytes::<T, A>(id.len());
            }
            e.dirty
        });
        self.charged -= freed;
        if let Some(budget) = &self.budget {
            budget.release(freed);
        }
    }

    fn release(&mut self) {
        if let Some(budget) = &self.budget {
            budget.release(self.charged);
        }
        self.charged = 0;
    }
}

impl<T: Clone + 'static, A: Clone + 'static> UpdateCache<T, A> {
    /// Flushes the updated entries in id order: `write` puts each one's
    /// aggregate into the store (logging it with the update's timestamp),
    /// then it goes downstream as `Change { new, old }`. With
    /// `keep_flushed` the entries stay, clean, unless the instance's budget
    /// is over its maximum; otherwise the cache empties. Stops at the first
    /// error, dropping every entry.
    pub(crate) fn flush(
        &mut self,
        ctx: &ProcessorContext<'_, T, Change<A>>,
        mut write: impl FnMut(&T, &A) -> Result<(), ProcessorError>,
    ) -> Result<(), ProcessorError> {
        let mut updated: Vec<(&Vec<u8>, &mut Held<T, A>)> =
            self.entries.iter_mut().filter(|(_, e)| e.dirty).collect();
        updated.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let previous = ctx.replace_timestamp(ctx.timestamp());
        let mut result = Ok(());
        for (_, e) in updated {
            let new = e.value.clone().expect("a held entry has a value");
            // The changelog record carries the latest update's timestamp.
            ctx.replace_timestamp(e.timestamp);
            result = write(&e.key, &new).and_then(|()| {
                let old = e.old.replace(new.clone());
                e.dirty = false;
                ctx.forward(Record {
                    key: e.key.clone(),
                    value: Change {
                        new: Some(new),
                        old,
                    },
                    timestamp: e.timestamp,
                    headers: std::mem::take(&mut e.headers),
                })
            });
            if result.is_err() {
                break;
            }
        }
        ctx.replace_timestamp(previous);
        if result.is_err() || !self.keep_flushed || self.budget.as_ref().is_none_or(|b| b.over()) {
            self.discard();
        }
        result
    }
}

impl<T, A> Drop for UpdateCache<T, A> {
    fn drop(&mut self) {
        self.release();
    }
}

/// The aggregation function: `(key, value, current aggregate) → new
/// aggregate`. It fails only for the `try_` aggregations, handing the
/// aggregate it was given back so that the store and cache keep it.
pub(crate) type AggregateFn<K, V, A> =
    Arc<dyn Fn(&K, V, Option<A>) -> Result<A, StepFailed<A>> + Send + Sync>;

/// A failed aggregation step: the error (for the processing handler) and the
/// aggregate the step was given, unchanged.
pub(crate) struct StepFailed<A> {
    pub(crate) error: ProcessorError,
    pub(crate) aggregate: Option<A>,
}

/// An [`AggregateFn`] of a user's fallible `initializer` and `aggregator`
/// (`try_aggregate`): the aggregator borrows the aggregate, which stays as
/// it was when either fails.
pub(crate) fn try_aggregate_fn<K, V, A: 'static>(
    initializer: impl Fn() -> Result<A, ProcessorError> + Send + Sync + 'static,
    aggregator: impl Fn(&K, V, &A) -> Result<A, ProcessorError> + Send + Sync + 'static,
) -> impl Fn(&K, V, Option<A>) -> Result<A, StepFailed<A>> + Send + Sync + 'static {
    move |key, value, old| {
        let had = old.is_some();
        let current = match old {
            Some(a) => a,
            None => initializer().map_err(|error| StepFailed {
                error,
                aggregate: None,
            })?,
        };
        aggregator(key, value, &current).map_err(|error| StepFailed {
            error,
            aggregate: had.then_some(current),
        })
    }
}

/// An [`AggregateFn`] of a user's fallible `reducer` (`try_reduce`): the
/// first value of a key is its aggregate.
pub(crate) fn try_reduce_fn<K, V: 'static>(
    reducer: impl Fn(&V, V) -> Result<V, ProcessorError> + Send + Sync + 'static,
) -> impl Fn(&K, V, Option<V>) -> Result<V, StepFailed<V>> + Send + Sync + 'static {
    move |_, value, old| match old {
        None => Ok(value),
        Some(current) => reducer(&current, value).map_err(|error| StepFailed {
            error,
            aggregate: Some(current),
        }),
    }
}

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
        CachingNode::<_, K, V, K, Change<A>>::boxed(AggregateNode {
            store,
            key_serde,
            f,
            cache: UpdateCache::keeping_flushed(),
            key_buf: Vec::new(),
        })
    }
}

impl<K: Clone + Send + 'static, V: 'static, A: Clone + Send + 'static> Processor<K, V, K, Change<A>>
    for AggregateNode<K, V, A>
{
    fn init(&mut self, ctx: &ProcessorContext<'_, K, Change<A>>) -> Result<(), ProcessorError> {
        self.cache.set_budget(ctx.cache_budget_for(&self.store));
        Ok(())
    }

    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, K, Change<A>>,
        r: Record<K, V>,
    ) -> Result<(), ProcessorError> {
        let kv = ctx.key_value_store::<K, A>(&self.store)?;
        if !self.cache.enabled() {
            let old = kv.get(&r.key)?;
            let new = (self.f)(&r.key, r.value, old.clone()).map_err(|f| f.error)?;
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
            .map_err(ProcessorError::serialize(KeyOrValue::Key, &self.store))?;
        if let Some(e) = self.cache.get_mut(&self.key_buf) {
            e.update(r.timestamp, |current| (self.f)(&r.key, r.value, current))?;
            e.headers = r.headers;
            return Ok(());
        }
        let old = kv.get(&r.key)?;
        let new = (self.f)(&r.key, r.value, old.clone()).map_err(|f| f.error)?;
        let held = Held::new(r.key, new, old, r.timestamp, r.headers);
        if self.cache.insert(self.key_buf.clone(), held) {
            self.flush(ctx)?;
        }
        Ok(())
    }
}

impl<K: Clone + Send + 'static, V: 'static, A: Clone + Send + 'static> CacheHooks<K, Change<A>>
    for AggregateNode<K, V, A>
{
    /// Writes and forwards every held key, in key order.
    fn flush(&mut self, ctx: &ProcessorContext<'_, K, Change<A>>) -> Result<(), ProcessorError> {
        let kv = ctx.key_value_store::<K, A>(&self.store)?;
        self.cache.flush(ctx, |key, new| kv.put(key, new))
    }

    fn discard(&mut self) {
        self.cache.discard();
    }
}
