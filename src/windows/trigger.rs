//! The trigger's bookkeeping store: which windows are open and how many
//! updates each has had since its last emitted result.
//!
//! One logged key-value store per windowed aggregation (`<store>-trigger`,
//! bytes → bytes). Key: the window's id, which is its changelog key in the
//! window or session store. Value: `end_ms` (8 bytes BE) ++ `pending`
//! (8 bytes BE, updates since the last result).
//!
//! One more entry, under the empty key (no window id is empty), holds the
//! close bound of the last sweep that emitted final results (8 bytes BE).
//! Processors treat windows at or before it as closed even when the task's
//! stream time restarted lower (after a restart), so a window whose final
//! result was emitted never reopens.
//!
//! Invariants: an entry exists exactly while its window is open and has
//! been updated at least once; [`take_closed`] deletes the entries it
//! returns, in the same transaction as the final results the caller forwards,
//! so each window's final result is emitted exactly once even across
//! restarts (the store is restored from its changelog with the others).
//! Used only by the emit-final and early strategies.

use crate::processor::{KeyValueStoreHandle, ProcessorError};

/// Handle type of the trigger store.
pub(crate) type TriggerStore<'a> = KeyValueStoreHandle<'a, Vec<u8>, Vec<u8>>;

fn encode(end_ms: i64, pending: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&end_ms.to_be_bytes());
    v.extend_from_slice(&pending.to_be_bytes());
    v
}

fn decode(value: &[u8]) -> (i64, u64) {
    let end = value
        .get(..8)
        .map_or(0, |b| i64::from_be_bytes(b.try_into().expect("8 bytes")));
    let pending = value
        .get(8..16)
        .map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")));
    (end, pending)
}

/// Records one update of window `id` (ending at `end_ms`). Returns `true`
/// when an early result is due (`every_updates > 0` updates since the last
/// one); the counter then restarts.
pub(crate) fn on_update(
    store: &TriggerStore<'_>,
    id: &[u8],
    end_ms: i64,
    every_updates: u64,
) -> Result<bool, ProcessorError> {
    let key = id.to_vec();
    let pending = store.get(&key)?.map_or(0, |v| decode(&v).1) + 1;
    let fire = every_updates > 0 && pending >= every_updates;
    store.put(&key, &encode(end_ms, if fire { 0 } else { pending }))?;
    Ok(fire)
}

/// Forgets window `id` (merged into another session).
pub(crate) fn remove(store: &TriggerStore<'_>, id: &[u8]) -> Result<(), ProcessorError> {
    store.delete(&id.to_vec()).map(|_| ())
}

/// The close bound of the last sweep that emitted results, if any.
pub(crate) fn closed_bound(store: &TriggerStore<'_>) -> Result<Option<i64>, ProcessorError> {
    Ok(store.get(&Vec::new())?.map(|v| decode(&v).0))
}

/// Removes and returns the windows `is_closed(end_ms)` says are closed at
/// close bound `bound`, by end time then id; records `bound` when any closed.
pub(crate) fn take_closed(
    store: &TriggerStore<'_>,
    bound: i64,
    is_closed: impl Fn(i64) -> bool,
) -> Result<Vec<Vec<u8>>, ProcessorError> {
    let mut closed: Vec<(i64, Vec<u8>)> = store
        .all()?
        .into_iter()
        .filter_map(|(id, v)| {
            let (end, _) = decode(&v);
            (!id.is_empty() && is_closed(end)).then_some((end, id))
        })
        .collect();
    if closed.is_empty() {
        return Ok(Vec::new());
    }
    closed.sort();
    for (_, id) in &closed {
        store.delete(id)?;
    }
    if closed_bound(store)?.is_none_or(|b| b < bound) {
        store.put(&Vec::new(), &encode(bound, 0))?;
    }
    Ok(closed.into_iter().map(|(_, id)| id).collect())
}

/// Returns the windows updated since their last result, by end time then
/// id, and resets their counters.
pub(crate) fn take_pending(store: &TriggerStore<'_>) -> Result<Vec<Vec<u8>>, ProcessorError> {
    let mut pending: Vec<(i64, Vec<u8>)> = store
        .all()?
        .into_iter()
        .filter_map(|(id, v)| {
            let (end, n) = decode(&v);
            (!id.is_empty() && n > 0).then_some((end, id))
        })
        .collect();
    pending.sort();
    for (end, id) in &pending {
        store.put(id, &encode(*end, 0))?;
    }
    Ok(pending.into_iter().map(|(_, id)| id).collect())
}
