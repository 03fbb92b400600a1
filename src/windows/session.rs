//! The session-window aggregation processor.
//!
//! Per record at `ts` (as Kafka Streams' `KStreamSessionWindowAggregate`):
//! find the key's sessions within `gap` of `ts` (ending at or after
//! `ts - gap`, starting at or before `ts + gap`); the record's session is the
//! union of them and `[ts, ts]`. If that session ended before
//! `stream time - gap - grace` the record is late. Otherwise the found
//! sessions' aggregates are merged (`merger`) and the record is aggregated
//! in; only when both succeeded (a user's merger or aggregator may fail: the
//! record's processing error then leaves every session as it was) is
//! every found session whose window differs from the merged one removed
//! — with a tombstone `Change { new: None, old }` under the emit-on-update
//! strategy — and the merged session is written and forwarded. Emit-final and
//! early strategies track sessions in the trigger store instead (removed
//! sessions are forgotten there, never emitted).

use std::sync::Arc;

use crate::processor::{Change, Processor, ProcessorContext, ProcessorError, Record};
use crate::state::SessionKey;
use crate::state::session::{changelog_key, parse_changelog_key};

use super::time::Spec;
use super::trigger;
use super::{SessionWindows, Window, Windowed};

/// Merges two session aggregates of a key: `(key, a, b) -> merged`.
pub(crate) type MergeFn<K, A> = Arc<dyn Fn(&K, A, A) -> Result<A, ProcessorError> + Send + Sync>;

/// Aggregates a record into its session: `(key, value, merged aggregate of
/// the sessions it joins, if any) -> aggregate`.
pub(crate) type SessionAggregateFn<K, V, A> =
    Arc<dyn Fn(&K, V, Option<A>) -> Result<A, ProcessorError> + Send + Sync>;

/// Aggregates a grouped stream over [`SessionWindows`].
pub(crate) struct SessionWindowAggregate<K, V, A> {
    pub(crate) windows: SessionWindows,
    pub(crate) spec: Arc<Spec<K, V>>,
    pub(crate) f: SessionAggregateFn<K, V, A>,
    pub(crate) merger: MergeFn<K, A>,
}

type Out<'a, K, A> = ProcessorContext<'a, Windowed<K>, Change<A>>;

fn session_id(key_bytes: &[u8], window: Window) -> Vec<u8> {
    changelog_key(&SessionKey {
        key: key_bytes.to_vec(),
        start_ms: window.start_ms,
        end_ms: window.end_ms,
    })
}

/// Forwards the current aggregate of each session id (early or final result).
fn forward_ids<K: Clone + 'static, V: 'static, A: Clone + 'static>(
    spec: &Spec<K, V>,
    ctx: &Out<'_, K, A>,
    ids: &[Vec<u8>],
) -> Result<(), ProcessorError> {
    let store = ctx.session_store::<K, A>(&spec.store)?;
    for id in ids {
        let Some(session) = parse_changelog_key(id) else {
            continue;
        };
        let key = spec.decode_key(&session.key)?;
        let found = store.find_sessions(&key, session.end_ms, session.start_ms)?;
        let exact = found
            .into_iter()
            .find(|((s, e), _)| (*s, *e) == (session.start_ms, session.end_ms));
        if let Some((_, value)) = exact {
            ctx.forward(Record::new(
                Windowed::new(key, session.start_ms, session.end_ms),
                Change {
                    new: Some(value),
                    old: None,
                },
                ctx.timestamp(),
            ))?;
        }
    }
    Ok(())
}

impl<K, V, A> Processor<K, V, Windowed<K>, Change<A>> for SessionWindowAggregate<K, V, A>
where
    K: Clone + 'static,
    V: Clone + 'static,
    A: Clone + 'static,
{
    fn init(&mut self, ctx: &Out<'_, K, A>) -> Result<(), ProcessorError> {
        self.spec.schedule_early(ctx, forward_ids::<K, V, A>);
        Ok(())
    }

    fn process(&mut self, ctx: &Out<'_, K, A>, r: Record<K, V>) -> Result<(), ProcessorError> {
        let spec = &self.spec;
        let (gap, grace) = (self.windows.gap_ms(), self.windows.grace_ms());
        let stream_time = ctx.stream_time();
        let store = ctx.session_store::<K, A>(&spec.store)?;
        let triggers = spec.trigger(ctx)?;
        let close_bound = spec.close_bound(
            &triggers,
            stream_time.saturating_sub(gap).saturating_sub(grace),
        )?;
        let ts = r.timestamp;

        let found = store.find_sessions(&r.key, ts.saturating_sub(gap), ts.saturating_add(gap))?;
        let mut merged = Window {
            start_ms: ts,
            end_ms: ts,
        };
        for ((start, end), _) in &found {
            merged.start_ms = merged.start_ms.min(*start);
            merged.end_ms = merged.end_ms.max(*end);
        }
        if merged.end_ms < close_bound {
            spec.drop_late(ctx, &r.key, &r.value, close_bound)?;
        } else {
            let key_bytes = match &triggers {
                Some(_) => spec.encode_key(&spec.store, &r.key)?,
                None => Vec::new(),
            };
            // Every user call first: a failure leaves the sessions as they were.
            let mut agg: Option<A> = None;
            for (_, value) in &found {
                agg = Some(match agg {
                    None => value.clone(),
                    Some(a) => (self.merger)(&r.key, a, value.clone())?,
                });
            }
            let new = (self.f)(&r.key, r.value, agg)?;
            let mut old_same_window = None;
            for ((start, end), value) in found {
                let window = Window {
                    start_ms: start,
                    end_ms: end,
                };
                if window == merged {
                    old_same_window = Some(value);
                    continue;
                }
                store.remove(&r.key, start, end)?;
                match &triggers {
                    Some(t) => trigger::remove(t, &session_id(&key_bytes, window))?,
                    None => ctx.forward(Record::new(
                        Windowed::new(r.key.clone(), start, end),
                        Change {
                            new: None,
                            old: Some(value),
                        },
                        ts,
                    ))?,
                }
            }
            store.put(&r.key, merged.start_ms, merged.end_ms, &new)?;
            let change = match &triggers {
                None => Some(Change {
                    new: Some(new),
                    old: old_same_window,
                }),
                Some(t) => {
                    let id = session_id(&key_bytes, merged);
                    trigger::on_update(t, &id, merged.end_ms, spec.every_updates())?.then_some(
                        Change {
                            new: Some(new),
                            old: None,
                        },
                    )
                }
            };
            if let Some(change) = change {
                let windowed = Windowed::new(r.key, merged.start_ms, merged.end_ms);
                ctx.forward(Record::new(windowed, change, ts))?;
            }
        }
        if let Some(t) = &triggers {
            let ids = trigger::take_closed(t, close_bound, |end| end < close_bound)?;
            forward_ids(spec, ctx, &ids)?;
        }
        store.expire(stream_time)
    }
}
