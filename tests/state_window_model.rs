//! Model-based tests of the window and session stores: random puts,
//! fetches, expiry, commits, aborts and reopens against a simple model, on
//! both backends.

use std::collections::BTreeMap;

use proptest::prelude::*;
use weir::state::{
    InMemorySessionStore, InMemoryWindowStore, RocksDbMemory, RocksDbSessionStore,
    RocksDbWindowStore, SessionKey, SessionStore, StateConfig, WindowStore, window,
};

const RETENTION_MS: i64 = 100;
const SEGMENT_MS: i64 = 25;

#[derive(Clone, Debug)]
enum Op {
    Put(Vec<u8>, i64, Option<Vec<u8>>),
    Fetch(Vec<u8>, i64),
    FetchRange(Vec<u8>, i64, i64),
    FetchAll(i64, i64),
    Expire(i64),
    Commit,
    Abort,
    Reopen,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    // Keys that are prefixes of each other exercise the in-segment filter.
    prop::collection::vec(
        prop_oneof![Just(0u8), Just(1), Just(0x80), Just(0xff)],
        0..3,
    )
}

fn time() -> impl Strategy<Value = i64> {
    -60i64..400
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (key(), time(), prop::option::weighted(0.85, prop::collection::vec(any::<u8>(), 0..4)))
            .prop_map(|(k, t, v)| Op::Put(k, t, v)),
        2 => (key(), time()).prop_map(|(k, t)| Op::Fetch(k, t)),
        3 => (key(), time(), time()).prop_map(|(k, a, b)| Op::FetchRange(k, a, b)),
        2 => (time(), time()).prop_map(|(a, b)| Op::FetchAll(a, b)),
        2 => time().prop_map(Op::Expire),
        3 => Just(Op::Commit),
        2 => Just(Op::Abort),
        1 => Just(Op::Reopen),
    ]
}

fn seg(t: i64) -> i64 {
    t.div_euclid(SEGMENT_MS)
}

/// The model: entries by (key, start), plus the lowest live segment.
#[derive(Clone, Default)]
struct Model {
    entries: BTreeMap<(Vec<u8>, i64), Vec<u8>>,
    min_live: i64,
}

impl Model {
    fn live(&self, t: i64) -> bool {
        seg(t) >= self.min_live
    }
}

type Entry = (Vec<u8>, i64, Vec<u8>);

fn run_window(
    ops: &[Op],
    mut open: impl FnMut() -> Box<dyn WindowStore>,
    durable: bool,
) -> Result<(), TestCaseError> {
    let mut store = open();
    let mut committed = Model {
        min_live: i64::MIN,
        ..Model::default()
    };
    let mut working = committed.clone();
    let mut offset = 0;
    for op in ops {
        match op {
            Op::Put(k, t, v) => {
                store.put(k, *t, v.as_deref()).unwrap();
                if working.live(*t) {
                    match v {
                        Some(v) => working.entries.insert((k.clone(), *t), v.clone()),
                        None => working.entries.remove(&(k.clone(), *t)),
                    };
                }
            }
            Op::Fetch(k, t) => {
                let want = working
                    .live(*t)
                    .then(|| working.entries.get(&(k.clone(), *t)).cloned())
                    .flatten();
                prop_assert_eq!(store.fetch(k, *t).unwrap(), want);
            }
            Op::FetchRange(k, from, to) => {
                let got: Vec<Entry> = store
                    .fetch_range(k, *from, *to)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                let want: Vec<Entry> = working
                    .entries
                    .iter()
                    .filter(|((ek, t), _)| ek == k && (*from..=*to).contains(t) && working.live(*t))
                    .map(|((ek, t), v)| (ek.clone(), *t, v.clone()))
                    .collect();
                prop_assert_eq!(got, want);
            }
            Op::FetchAll(from, to) => {
                let got: Vec<Entry> = store
                    .fetch_all(*from, *to)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                let mut want: Vec<Entry> = working
                    .entries
                    .iter()
                    .filter(|((_, t), _)| (*from..=*to).contains(t) && working.live(*t))
                    .map(|((k, t), v)| (k.clone(), *t, v.clone()))
                    .collect();
                // Documented order: segment, then in-segment key bytes.
                want.sort_by_key(|(k, t, _)| (seg(*t), window::changelog_key(k, *t)));
                prop_assert_eq!(got, want);
            }
            Op::Expire(st) => {
                store.expire(*st).unwrap();
                working.min_live = working
                    .min_live
                    .max((st - RETENTION_MS).div_euclid(SEGMENT_MS));
            }
            Op::Commit => {
                offset += 1;
                store.commit(Some(offset)).unwrap();
                let min_live = working.min_live;
                working.entries.retain(|(_, t), _| seg(*t) >= min_live);
                committed = working.clone();
            }
            Op::Abort => {
                store.abort();
                working = committed.clone();
            }
            Op::Reopen => {
                store.close().unwrap();
                drop(store);
                store = open();
                if !durable {
                    committed = Model {
                        min_live: i64::MIN,
                        ..Model::default()
                    };
                    offset = 0;
                }
                working = committed.clone();
            }
        }
        let want_offset = (offset > 0).then_some(offset);
        prop_assert_eq!(store.committed_offset(), want_offset);
    }
    Ok(())
}

fn memory() -> RocksDbMemory {
    RocksDbMemory::new(&StateConfig {
        memory_budget_bytes: 8 << 20,
        ..StateConfig::default()
    })
}

/// A session operation: kind (put/remove, find, expire+commit), key, two
/// times, value (`None` removes).
type SessionOp = (u8, Vec<u8>, i64, i64, Option<Vec<u8>>);

/// Session model: sessions by (key, end, start).
fn run_session(ops: &[SessionOp], store: &mut dyn SessionStore) -> Result<(), TestCaseError> {
    let mut model: BTreeMap<(Vec<u8>, i64, i64), Vec<u8>> = BTreeMap::new();
    let mut min_live = i64::MIN;
    for (kind, k, a, b, v) in ops {
        let (start, end) = (*a.min(b), *a.max(b));
        let s = SessionKey {
            key: k.clone(),
            start_ms: start,
            end_ms: end,
        };
        match kind % 4 {
            0 | 1 => {
                match v {
                    Some(v) => store.put(&s, v).unwrap(),
                    None => store.remove(&s).unwrap(),
                }
                if seg(end) >= min_live {
                    match v {
                        Some(v) => model.insert((k.clone(), end, start), v.clone()),
                        None => model.remove(&(k.clone(), end, start)),
                    };
                }
            }
            2 => {
                // find_sessions(key, earliest_end = a, latest_start = b)
                let got: Vec<(SessionKey, Vec<u8>)> = store
                    .find_sessions(k, *a, *b)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                let want: Vec<(SessionKey, Vec<u8>)> = model
                    .iter()
                    .filter(|((mk, e, st), _)| {
                        mk == k && *e >= *a && *st <= *b && seg(*e) >= min_live
                    })
                    .map(|((mk, e, st), v)| {
                        (
                            SessionKey {
                                key: mk.clone(),
                                start_ms: *st,
                                end_ms: *e,
                            },
                            v.clone(),
                        )
                    })
                    .collect();
                prop_assert_eq!(got, want);
            }
            _ => {
                store.expire(*a).unwrap();
                min_live = min_live.max((a - RETENTION_MS).div_euclid(SEGMENT_MS));
                store.commit(None).unwrap();
            }
        }
    }
    Ok(())
}

fn session_op() -> impl Strategy<Value = SessionOp> {
    (
        any::<u8>(),
        key(),
        time(),
        time(),
        prop::option::weighted(0.85, prop::collection::vec(any::<u8>(), 0..4)),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn in_memory_window_store_matches_model(ops in prop::collection::vec(op(), 1..80)) {
        run_window(&ops, || Box::new(InMemoryWindowStore::new("w", RETENTION_MS, SEGMENT_MS).unwrap()), false)?;
    }

    #[test]
    fn rocksdb_window_store_matches_model(ops in prop::collection::vec(op(), 1..80)) {
        let dir = tempfile::tempdir().unwrap();
        let mem = memory();
        run_window(&ops, || Box::new(RocksDbWindowStore::open(dir.path(), "w", &mem, RETENTION_MS, SEGMENT_MS).unwrap()), true)?;
    }

    #[test]
    fn in_memory_session_store_matches_model(ops in prop::collection::vec(session_op(), 1..80)) {
        let mut store = InMemorySessionStore::new("s", RETENTION_MS, SEGMENT_MS).unwrap();
        run_session(&ops, &mut store)?;
    }

    #[test]
    fn rocksdb_session_store_matches_model(ops in prop::collection::vec(session_op(), 1..80)) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = RocksDbSessionStore::open(dir.path(), "s", &memory(), RETENTION_MS, SEGMENT_MS).unwrap();
        run_session(&ops, &mut store)?;
    }
}

#[test]
fn window_and_session_stores_restore_from_their_changelog_keys() {
    use weir::state::{ChangelogRecord, StateStore, StoreError, session};
    let dir = tempfile::tempdir().unwrap();
    let mem = memory();
    // Window store: records as the runtime would log them.
    let mut log: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    for i in 0..50i64 {
        let k = vec![(i % 3) as u8];
        log.push((window::changelog_key(&k, i * 10), Some(vec![i as u8])));
    }
    log.push((window::changelog_key(&[1], 10), None)); // a delete
    let recs: Vec<ChangelogRecord<'_>> = log
        .iter()
        .map(|(k, v)| ChangelogRecord {
            key: k,
            value: v.as_deref(),
        })
        .collect();
    let mut restored =
        RocksDbWindowStore::open(&dir.path().join("w"), "w", &mem, 1_000, 100).unwrap();
    restored.restore_batch(&recs[..20], 20).unwrap();
    restored.restore_batch(&recs[20..], 51).unwrap();
    assert_eq!(restored.committed_offset(), Some(51));
    let mut source = InMemoryWindowStore::new("w", 1_000, 100).unwrap();
    for i in 0..50i64 {
        source
            .put(&[(i % 3) as u8], i * 10, Some(&[i as u8]))
            .unwrap();
    }
    source.put(&[1], 10, None).unwrap();
    let got: Vec<_> = restored
        .fetch_all(i64::MIN, i64::MAX)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let want: Vec<_> = source
        .fetch_all(i64::MIN, i64::MAX)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got, want);
    assert_eq!(got.len(), 49);
    let short = [ChangelogRecord {
        key: b"abc",
        value: None,
    }];
    assert!(matches!(
        restored.restore_batch(&short, 52),
        Err(StoreError::Corrupt { .. })
    ));

    // Session store.
    let s = SessionKey {
        key: b"k".to_vec(),
        start_ms: 5,
        end_ms: 70,
    };
    let key = session::changelog_key(&s);
    assert_eq!(session::parse_changelog_key(&key), Some(s.clone()));
    let mut sessions =
        RocksDbSessionStore::open(&dir.path().join("s"), "s", &mem, 1_000, 100).unwrap();
    sessions
        .restore_batch(
            &[ChangelogRecord {
                key: &key,
                value: Some(b"agg"),
            }],
            7,
        )
        .unwrap();
    let found: Vec<_> = sessions
        .find_sessions(b"k", 0, 100)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(found, vec![(s, b"agg".to_vec())]);
    assert_eq!(sessions.committed_offset(), Some(7));
}
