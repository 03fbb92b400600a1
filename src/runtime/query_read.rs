//! One read of a task's store for an interactive query, on serialized
//! keys: what is asked ([`StoreRead`]) and what a task's store gives
//! ([`read_task`]), for an active task (`query.rs`) or a standby copy
//! (`standby.rs`).

use std::ops::Bound;

use crate::processor::TaskInstance;
use crate::state::KeyValueStore;

/// One read of a key-value store, on serialized keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreRead {
    /// The value of one key.
    Get(Vec<u8>),
    /// Entries with keys in `from..=to` (serialized key order); `None` is
    /// unbounded.
    Range {
        from: Option<Vec<u8>>,
        to: Option<Vec<u8>>,
    },
    /// Entries whose serialized key starts with the bytes.
    Prefix(Vec<u8>),
    /// The approximate number of entries.
    Count,
    /// A window store's windows of one key that start in `from..=to`.
    WindowFetch { key: Vec<u8>, from: i64, to: i64 },
    /// A window store's windows of every key that start in `from..=to`.
    WindowAll { from: i64, to: i64 },
    /// A session store's sessions of one key.
    SessionFetch(Vec<u8>),
}

/// One window or session of a window or session store: key, start, end
/// (sessions only), value.
pub(crate) type WindowEntry = (Vec<u8>, i64, Option<i64>, Vec<u8>);

pub(crate) type KvEntries = Vec<(Vec<u8>, Vec<u8>)>;

/// What one task's store gave.
#[derive(Default)]
pub(crate) struct Found {
    pub(crate) entries: KvEntries,
    pub(crate) windows: Vec<WindowEntry>,
    pub(crate) count: u64,
}

/// Runs `read` on `task`'s store `store`; `None` when the task has no
/// store of that name and the read's kind.
pub(crate) fn read_task(
    task: &TaskInstance,
    store: &str,
    read: &StoreRead,
) -> Option<Result<Found, crate::state::StoreError>> {
    let collect_windows = |iter: crate::state::WindowIter<'_>| {
        iter.map(|r| r.map(|(k, start, v)| (k, start, None, v)))
            .collect::<Result<Vec<_>, _>>()
    };
    match read {
        StoreRead::WindowFetch { key, from, to } => task.read_window_store(store, |s| {
            Ok(Found {
                windows: collect_windows(s.fetch_range(key, *from, *to)?)?,
                ..Found::default()
            })
        }),
        StoreRead::WindowAll { from, to } => task.read_window_store(store, |s| {
            Ok(Found {
                windows: collect_windows(s.fetch_all(*from, *to)?)?,
                ..Found::default()
            })
        }),
        StoreRead::SessionFetch(key) => task.read_session_store(store, |s| {
            let sessions = s
                .find_sessions(key, i64::MIN, i64::MAX)?
                .map(|r| r.map(|(k, v)| (k.key, k.start_ms, Some(k.end_ms), v)))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Found {
                windows: sessions,
                ..Found::default()
            })
        }),
        _ => task.read_store(store, |s| {
            read_kv(s, read).map(|(entries, count)| Found {
                entries,
                count,
                ..Found::default()
            })
        }),
    }
}

fn read_kv(
    store: &dyn KeyValueStore,
    read: &StoreRead,
) -> Result<(KvEntries, u64), crate::state::StoreError> {
    let collect = |iter: crate::state::KvIter<'_>| iter.collect::<Result<Vec<_>, _>>();
    Ok(match read {
        StoreRead::Get(key) => (
            store
                .get(key)?
                .map(|v| (key.clone(), v))
                .into_iter()
                .collect(),
            0,
        ),
        StoreRead::Range { from, to } => {
            let bound = |b: &Option<Vec<u8>>| match b {
                Some(k) => Bound::Included(k.clone()),
                None => Bound::Unbounded,
            };
            let (from, to) = (bound(from), bound(to));
            let entries = collect(store.range(
                from.as_ref().map(Vec::as_slice),
                to.as_ref().map(Vec::as_slice),
            )?)?;
            (entries, 0)
        }
        StoreRead::Prefix(prefix) => (collect(store.prefix_scan(prefix)?)?, 0),
        StoreRead::Count => (Vec::new(), store.approximate_num_entries()?),
        StoreRead::WindowFetch { .. }
        | StoreRead::WindowAll { .. }
        | StoreRead::SessionFetch(_) => (Vec::new(), 0),
    })
}
