//! The sliding-window aggregation processor.
//!
//! Aggregates are not invertible, so a window's aggregate cannot be derived
//! from its neighbours'. The processor therefore buffers the key's records
//! (a logged window store `<store>-records`: key and timestamp → the values
//! at that timestamp, kept `2 × diff + grace + 1`, long enough to recompute
//! any window that can still change) and, per record at `ts`:
//!
//! 1. drops it as late when its left window `[ts - diff, ts]` is closed
//!    (`ts + grace < stream time`);
//! 2. appends it to the buffer;
//! 3. finds the windows that changed: those containing `ts` — the left windows `[r - diff, r]` of
//!    buffered records `r` in `[ts, ts + diff]` and the right windows
//!    `[r + 1, r + 1 + diff]` of records `r` in `[ts - diff - 1, ts - 1]`,
//!    plus `ts`'s own left window and its right window `[ts + 1, ts + 1 +
//!    diff]` (new when a record falls into it) — skipping closed ones;
//! 4. recomputes each from the buffered records it contains (by timestamp,
//!    then arrival), stores it and reports it per the trigger.
//!
//! A right window only exists while a record falls into it; a window never
//! loses records, so no window disappears. Out-of-order records
//! are handled exactly (the recompute sees them in timestamp order). The
//! cost per record is O(records of the key within `2 × diff`) per window.

use std::sync::Arc;

use crate::processor::{Change, Processor, ProcessorContext, ProcessorError, Record};
use crate::state::window::changelog_key;

use super::time::{AggregateFn, Spec, forward_ids};
use super::trigger;
use super::{SlidingWindows, Windowed};

/// Aggregates a grouped stream over [`SlidingWindows`].
pub(crate) struct SlidingWindowAggregate<K, V, A> {
    pub(crate) windows: SlidingWindows,
    /// The spec; its `buffer_store` is set.
    pub(crate) spec: Arc<Spec<K, V>>,
    pub(crate) f: AggregateFn<K, V, A>,
}

type Out<'a, K, A> = ProcessorContext<'a, Windowed<K>, Change<A>>;

impl<K, V, A> Processor<K, V, Windowed<K>, Change<A>> for SlidingWindowAggregate<K, V, A>
where
    K: Clone + 'static,
    V: Clone + 'static,
    A: Clone + 'static,
{
    fn init(&mut self, ctx: &Out<'_, K, A>) -> Result<(), ProcessorError> {
        let diff = self.windows.time_difference_ms();
        self.spec
            .schedule_early(ctx, move |spec, ctx, ids| forward_ids(spec, diff, ctx, ids));
        Ok(())
    }

    fn process(&mut self, ctx: &Out<'_, K, A>, r: Record<K, V>) -> Result<(), ProcessorError> {
        let spec = &self.spec;
        let diff = self.windows.time_difference_ms();
        let stream_time = ctx.stream_time();
        let store = ctx.window_store::<K, A>(&spec.store)?;
        let buffer_name = spec.buffer_store.as_deref().unwrap_or_default();
        let buffer = ctx.window_store::<K, Vec<V>>(buffer_name)?;
        let triggers = spec.trigger(ctx)?;
        // Windows are closed when their exclusive end (end + 1) <= bound.
        let close_bound = spec.close_bound(
            &triggers,
            stream_time.saturating_sub(self.windows.grace_ms()),
        )?;
        let ts = r.timestamp;
        if ts < close_bound {
            spec.drop_late(ctx, &r.key, &r.value, close_bound)?;
            return finish(spec, ctx, &triggers, close_bound, diff, stream_time);
        }
        let mut at_ts = buffer.fetch(&r.key, ts)?.unwrap_or_default();
        at_ts.push(r.value);
        buffer.put(&r.key, ts, Some(&at_ts))?;

        let nearby = buffer.fetch_range(&r.key, ts - 2 * diff - 1, ts + 2 * diff + 1)?;
        let mut starts: Vec<i64> = Vec::new();
        for &(rt, _) in &nearby {
            if (ts..=ts + diff).contains(&rt) {
                starts.push(rt - diff); // left window of rt contains ts
            }
            if (ts - diff - 1..=ts).contains(&rt) && rt != ts {
                starts.push(rt + 1); // right window of rt contains ts
            }
        }
        starts.push(ts - diff); // ts's own left window
        if nearby.iter().any(|&(rt, _)| rt > ts && rt <= ts + 1 + diff) {
            starts.push(ts + 1); // ts's right window, when a record falls in it
        }
        starts.sort_unstable();
        starts.dedup();

        let key_bytes = match &triggers {
            Some(_) => spec.encode_key(&spec.store, &r.key)?,
            None => Vec::new(),
        };
        // Every changed window's aggregate first, then the writes: when a
        // `try_` aggregation fails, nothing of the record stays (its value is
        // taken out of the buffer again).
        let mut updated: Vec<(i64, A)> = Vec::new();
        for start in starts {
            let end = start + diff;
            // Windows containing ts changed; ts's right window is new.
            let changed = (start..=end).contains(&ts) || start == ts + 1;
            if end < close_bound || !changed {
                continue;
            }
            let mut agg: Option<A> = None;
            for (_, values) in nearby.iter().filter(|(rt, _)| (start..=end).contains(rt)) {
                for v in values {
                    match (self.f)(&r.key, v.clone(), agg) {
                        Ok(a) => agg = Some(a),
                        Err(failed) => {
                            at_ts.pop();
                            buffer.put(&r.key, ts, (!at_ts.is_empty()).then_some(&at_ts))?;
                            return Err(failed.error);
                        }
                    }
                }
            }
            if let Some(new) = agg {
                updated.push((start, new));
            }
        }
        for (start, new) in updated {
            let end = start + diff;
            let old = store.fetch(&r.key, start)?;
            store.put(&r.key, start, Some(&new))?;
            let change = match &triggers {
                None => Some(Change {
                    new: Some(new),
                    old,
                }),
                Some(t) => {
                    let id = changelog_key(&key_bytes, start);
                    trigger::on_update(t, &id, end + 1, spec.every_updates())?.then_some(Change {
                        new: Some(new),
                        old: None,
                    })
                }
            };
            if let Some(change) = change {
                ctx.forward(Record::new(
                    Windowed::new(r.key.clone(), start, end),
                    change,
                    ts,
                ))?;
            }
        }
        finish(spec, ctx, &triggers, close_bound, diff, stream_time)?;
        buffer.expire(stream_time)
    }
}

/// Emits the final results of windows closed at `close_bound` and expires
/// the aggregate store.
fn finish<K: Clone + 'static, V: 'static, A: Clone + 'static>(
    spec: &Spec<K, V>,
    ctx: &Out<'_, K, A>,
    triggers: &Option<trigger::TriggerStore<'_>>,
    close_bound: i64,
    diff: i64,
    stream_time: i64,
) -> Result<(), ProcessorError> {
    if let Some(t) = triggers {
        let ids = trigger::take_closed(t, close_bound, |end| end <= close_bound)?;
        forward_ids(spec, diff, ctx, &ids)?;
    }
    ctx.window_store::<K, A>(&spec.store)?.expire(stream_time)
}
