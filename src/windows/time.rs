//! The time-window aggregation processor (tumbling and hopping windows), and
//! what it shares with the session processor: [`Spec`] and late handling.
//!
//! Per record: compute its windows, skip the closed ones (`end + grace <=
//! stream time`), update the open ones in the window store and report per the
//! trigger; a record with no open window is late. Then, for emit-final and
//! early strategies, forward the final result of every window that closed
//! since (see [`super::trigger`]), and expire the store at stream time —
//! after the final results, so a window is never expired before it was emitted.
//!
//! With `OnEveryUpdate` (no trigger) and the record cache on, the updates of
//! a window within a commit interval collapse as for key-value aggregations
//! ([`crate::processor::aggregate`]): the window's latest value is written
//! and forwarded once, at the flush before the commit (or when the budget is
//! full).

use std::sync::Arc;
use std::time::Duration;

use crate::processor::aggregate::{Held, UpdateCache};
use crate::processor::node::CacheHooks;
use crate::processor::{
    Change, Headers, Processor, ProcessorContext, ProcessorError, PunctuationType, Record,
};
use crate::serdes::SharedSerde;
use crate::state::window::{changelog_key, split_changelog_key};

use super::trigger::{self, TriggerStore};
use super::{EmitStrategy, TimeWindows, Windowed};

/// Where late records go, with the serdes for records that have no input
/// bytes (forwarded by a punctuator).
pub(crate) struct LateSink<K, V> {
    pub(crate) topic: String,
    pub(crate) key_serde: SharedSerde<K>,
    pub(crate) value_serde: SharedSerde<V>,
}

/// What a windowed aggregation node needs besides its windows and function.
pub(crate) struct Spec<K, V> {
    pub(crate) store: String,
    /// The trigger store; `Some` unless the strategy is `OnEveryUpdate`.
    pub(crate) trigger_store: Option<String>,
    pub(crate) emit: EmitStrategy,
    pub(crate) key_serde: SharedSerde<K>,
    pub(crate) late: Option<LateSink<K, V>>,
    /// The record buffer of sliding windows.
    pub(crate) buffer_store: Option<String>,
}

impl<K: 'static, V: 'static> Spec<K, V> {
    pub(crate) fn every_updates(&self) -> u64 {
        match self.emit {
            EmitStrategy::Early { every_updates, .. } => every_updates,
            _ => 0,
        }
    }

    pub(crate) fn encode_key(&self, store: &str, key: &K) -> Result<Vec<u8>, ProcessorError> {
        let mut out = Vec::new();
        self.key_serde
            .serialize(store, key, &mut out)
            .map_err(ProcessorError::serialize(
                crate::processor::KeyOrValue::Key,
                store,
            ))?;
        Ok(out)
    }

    pub(crate) fn decode_key(&self, bytes: &[u8]) -> Result<K, ProcessorError> {
        self.key_serde
            .deserialize(&self.store, bytes)
            .map_err(ProcessorError::store_read(
                crate::processor::KeyOrValue::Key,
                &self.store,
            ))
    }

    /// The close bound at stream time: `from_stream_time`, but never below
    /// the bound of the last emitted final results (see [`trigger`]).
    pub(crate) fn close_bound(
        &self,
        triggers: &Option<TriggerStore<'_>>,
        from_stream_time: i64,
    ) -> Result<i64, ProcessorError> {
        Ok(match triggers {
            Some(t) => {
                trigger::closed_bound(t)?.map_or(from_stream_time, |b| b.max(from_stream_time))
            }
            None => from_stream_time,
        })
    }

    pub(crate) fn trigger<'a, KO, VO>(
        &self,
        ctx: &ProcessorContext<'a, KO, VO>,
    ) -> Result<Option<TriggerStore<'a>>, ProcessorError> {
        self.trigger_store
            .as_deref()
            .map(|name| ctx.key_value_store::<Vec<u8>, Vec<u8>>(name))
            .transpose()
    }

    /// Counts a late record and writes it to the late-records topic, if
    /// any, with the headers of [`super::late_headers`]; `close_bound` is
    /// the bound windows had to end after (stream time minus grace).
    ///
    /// The late topic gets the input record's key and value bytes as they
    /// were read, like a dead-letter topic. A record a punctuator forwarded
    /// has no input record, so it is serialized with the aggregation's serdes.
    pub(crate) fn drop_late<KO, VO>(
        &self,
        ctx: &ProcessorContext<'_, KO, VO>,
        key: &K,
        value: &V,
        close_bound: i64,
    ) -> Result<(), ProcessorError> {
        ctx.record_late();
        let Some(late) = &self.late else {
            return Ok(());
        };
        let headers = super::late_headers(
            &self.store,
            ctx.timestamp(),
            ctx.stream_time(),
            close_bound,
            ctx.record_metadata(),
        );
        if let Some(input) = ctx.input() {
            return ctx.send_raw(&late.topic, input.key, input.value, &headers);
        }
        use crate::processor::KeyOrValue;
        let mut k = Vec::new();
        let mut v = Vec::new();
        let has_key = late
            .key_serde
            .serialize_nullable(&late.topic, key, &mut k)
            .map_err(ProcessorError::serialize(KeyOrValue::Key, &late.topic))?;
        let has_value = late
            .value_serde
            .serialize_nullable(&late.topic, value, &mut v)
            .map_err(ProcessorError::serialize(KeyOrValue::Value, &late.topic))?;
        ctx.send_raw(
            &late.topic,
            has_key.then_some(k.as_slice()),
            has_value.then_some(v.as_slice()),
            &headers,
        )
    }

    /// Schedules the wall-clock early firing, if the strategy has one:
    /// every interval, `fire` forwards the current results of the windows
    /// updated since their last result.
    pub(crate) fn schedule_early<KO: 'static, VO: 'static, F>(
        self: &Arc<Self>,
        ctx: &ProcessorContext<'_, KO, VO>,
        fire: F,
    ) where
        F: for<'c> Fn(
                &Self,
                &ProcessorContext<'c, KO, VO>,
                &[Vec<u8>],
            ) -> Result<(), ProcessorError>
            + Send
            + 'static,
    {
        if let EmitStrategy::Early {
            every_wall_clock_ms,
            ..
        } = self.emit
            && every_wall_clock_ms > 0
        {
            let spec = self.clone();
            ctx.schedule(
                Duration::from_millis(every_wall_clock_ms as u64),
                PunctuationType::WallClockTime,
                move |ctx, _now| {
                    let Some(store) = spec.trigger(ctx)? else {
                        return Ok(());
                    };
                    let ids = trigger::take_pending(&store)?;
                    fire(&spec, ctx, &ids)
                },
            );
        }
    }
}

pub(crate) use crate::processor::aggregate::AggregateFn;

/// Aggregates a grouped stream over [`TimeWindows`].
pub(crate) struct TimeWindowAggregate<K, V, A> {
    pub(crate) windows: TimeWindows,
    pub(crate) spec: Arc<Spec<K, V>>,
    pub(crate) f: AggregateFn<K, V, A>,
    /// Held window updates, by changelog key (key bytes ++ window start).
    pub(crate) cache: UpdateCache<Windowed<K>, A>,
}

type Out<'a, K, A> = ProcessorContext<'a, Windowed<K>, Change<A>>;

/// Forwards the current value of each window id (early or final result).
pub(crate) fn forward_ids<K: Clone + 'static, V: 'static, A: Clone + 'static>(
    spec: &Spec<K, V>,
    size_ms: i64,
    ctx: &Out<'_, K, A>,
    ids: &[Vec<u8>],
) -> Result<(), ProcessorError> {
    let store = ctx.window_store::<K, A>(&spec.store)?;
    for id in ids {
        let Some((k, start)) = split_changelog_key(id) else {
            continue;
        };
        let key = spec.decode_key(k)?;
        if let Some(value) = store.fetch(&key, start)? {
            ctx.forward(Record::new(
                Windowed::new(key, start, start + size_ms),
                Change {
                    new: Some(value),
                    old: None,
                },
                ctx.timestamp(),
            ))?;
        } else {
            // The trigger knows the window, the store does not: its data was
            // lost, e.g. the broker deleted its changelog records (window
            // changelogs are retained by event time) before a restore.
            tracing::warn!(
                task = %ctx.task_id(),
                store = %spec.store,
                window_start_ms = start,
                "a window tracked by the trigger has no value in its store; no result is emitted for it \
                 (were its changelog records deleted by retention? event times far in the past expire)"
            );
        }
    }
    Ok(())
}

impl<K, V, A> Processor<K, V, Windowed<K>, Change<A>> for TimeWindowAggregate<K, V, A>
where
    K: Clone + Send + 'static,
    V: Clone + 'static,
    A: Clone + Send + 'static,
{
    fn init(&mut self, ctx: &Out<'_, K, A>) -> Result<(), ProcessorError> {
        if self.spec.trigger_store.is_none() {
            self.cache
                .set_budget(ctx.cache_budget_for(&self.spec.store));
        }
        let size_ms = self.windows.size_ms();
        self.spec.schedule_early(ctx, move |spec, ctx, ids| {
            forward_ids(spec, size_ms, ctx, ids)
        });
        Ok(())
    }

    fn process(&mut self, ctx: &Out<'_, K, A>, r: Record<K, V>) -> Result<(), ProcessorError> {
        let spec = &self.spec.clone();
        let stream_time = ctx.stream_time();
        let store = ctx.window_store::<K, A>(&spec.store)?;
        let triggers = spec.trigger(ctx)?;
        let close_bound = spec.close_bound(
            &triggers,
            stream_time.saturating_sub(self.windows.grace_ms()),
        )?;
        let caching = self.cache.enabled();
        let key_bytes = if triggers.is_some() || caching {
            spec.encode_key(&spec.store, &r.key)?
        } else {
            Vec::new()
        };
        let mut open = false;
        for window in self.windows.windows_for(r.timestamp) {
            if window.end_ms <= close_bound {
                continue;
            }
            open = true;
            if caching {
                let id = changelog_key(&key_bytes, window.start_ms);
                if let Some(e) = self.cache.get_mut(&id) {
                    e.update(r.timestamp, |current| {
                        (self.f)(&r.key, r.value.clone(), current)
                    })?;
                    continue;
                }
                let old = store.fetch(&r.key, window.start_ms)?;
                let new = (self.f)(&r.key, r.value.clone(), old.clone()).map_err(|f| f.error)?;
                let held = Held::new(
                    Windowed::new(r.key.clone(), window.start_ms, window.end_ms),
                    new,
                    old,
                    r.timestamp,
                    Headers::new(),
                );
                if self.cache.insert(id, held) {
                    self.flush(ctx)?;
                }
                continue;
            }
            let old = store.fetch(&r.key, window.start_ms)?;
            let new = (self.f)(&r.key, r.value.clone(), old.clone()).map_err(|f| f.error)?;
            store.put(&r.key, window.start_ms, Some(&new))?;
            let windowed = Windowed::new(r.key.clone(), window.start_ms, window.end_ms);
            let change = match &triggers {
                None => Some(Change {
                    new: Some(new),
                    old,
                }),
                Some(t) => {
                    let id = changelog_key(&key_bytes, window.start_ms);
                    trigger::on_update(t, &id, window.end_ms, spec.every_updates())?.then_some(
                        Change {
                            new: Some(new),
                            old: None,
                        },
                    )
                }
            };
            if let Some(change) = change {
                ctx.forward(Record::new(windowed, change, r.timestamp))?;
            }
        }
        if !open {
            spec.drop_late(ctx, &r.key, &r.value, close_bound)?;
        }
        if let Some(t) = &triggers {
            let ids = trigger::take_closed(t, close_bound, |end| end <= close_bound)?;
            forward_ids(spec, self.windows.size_ms(), ctx, &ids)?;
        }
        store.expire(stream_time)
    }
}

impl<K, V, A> CacheHooks<Windowed<K>, Change<A>> for TimeWindowAggregate<K, V, A>
where
    K: Clone + Send + 'static,
    V: Clone + 'static,
    A: Clone + Send + 'static,
{
    fn flush(&mut self, ctx: &Out<'_, K, A>) -> Result<(), ProcessorError> {
        let store = ctx.window_store::<K, A>(&self.spec.store)?;
        self.cache.flush(ctx, |windowed, new| {
            store.put(&windowed.key, windowed.window.start_ms, Some(new))
        })
    }

    fn discard(&mut self) {
        self.cache.discard();
    }
}
