//! Model-based tests of the key-value stores: random operation sequences
//! (put, put_if_absent, delete, get, range, prefix scan, full scan, commit,
//! abort, restore, reopen) run against each backend and against a
//! `BTreeMap` model that knows the commit/abort invariant.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

use proptest::prelude::*;
use weir::state::{
    ChangelogRecord, InMemoryKeyValueStore, KeyValueStore, RocksDbKeyValueStore, RocksDbMemory,
    StateConfig, StoreError,
};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Clone, Debug)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    PutIfAbsent(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Get(Vec<u8>),
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>),
    Prefix(Vec<u8>),
    All,
    Commit(bool),
    Abort,
    Restore(Vec<(Vec<u8>, Option<Vec<u8>>)>),
    Reopen,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    // A tiny alphabet with 0x00 and 0xff makes collisions, shared prefixes
    // and prefix-successor edge cases common.
    prop::collection::vec(prop_oneof![Just(0u8), Just(1), Just(2), Just(0xff)], 0..4)
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..6)
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        key().prop_map(Bound::Included),
        key().prop_map(Bound::Excluded),
        Just(Bound::Unbounded)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (key(), value()).prop_map(|(k, v)| Op::Put(k, v)),
        1 => (key(), value()).prop_map(|(k, v)| Op::PutIfAbsent(k, v)),
        3 => key().prop_map(Op::Delete),
        2 => key().prop_map(Op::Get),
        2 => (bound(), bound()).prop_map(|(a, b)| Op::Range(a, b)),
        2 => key().prop_map(Op::Prefix),
        1 => Just(Op::All),
        3 => any::<bool>().prop_map(Op::Commit),
        2 => Just(Op::Abort),
        1 => prop::collection::vec((key(), prop::option::of(value())), 0..5).prop_map(Op::Restore),
        1 => Just(Op::Reopen),
    ]
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn in_bounds(k: &[u8], from: &Bound<Vec<u8>>, to: &Bound<Vec<u8>>) -> bool {
    let lo = match from {
        Bound::Included(f) => k >= f.as_slice(),
        Bound::Excluded(f) => k > f.as_slice(),
        Bound::Unbounded => true,
    };
    let hi = match to {
        Bound::Included(t) => k <= t.as_slice(),
        Bound::Excluded(t) => k < t.as_slice(),
        Bound::Unbounded => true,
    };
    lo && hi
}

fn collect(it: weir::state::KvIter<'_>) -> Vec<(Vec<u8>, Vec<u8>)> {
    it.map(|r| r.expect("iteration succeeds")).collect()
}

fn pick(m: &Map, f: impl Fn(&[u8]) -> bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.iter()
        .filter(|(k, _)| f(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Runs `ops` against the store from `open` and the model. `durable`: the
/// store keeps committed state across `open` calls (RocksDB).
fn run(
    ops: &[Op],
    mut open: impl FnMut() -> Box<dyn KeyValueStore>,
    durable: bool,
) -> Result<(), TestCaseError> {
    let mut store = open();
    let mut committed = Map::new();
    let mut working = Map::new();
    let mut committed_offset: Option<i64> = None;
    let mut dirty = false;
    let mut next_offset = 0i64;
    for op in ops {
        match op {
            Op::Put(k, v) => {
                store.put(k, v).unwrap();
                working.insert(k.clone(), v.clone());
                dirty = true;
            }
            Op::PutIfAbsent(k, v) => {
                let got = store.put_if_absent(k, v).unwrap();
                prop_assert_eq!(got.as_ref(), working.get(k));
                if got.is_none() {
                    working.insert(k.clone(), v.clone());
                    dirty = true;
                }
            }
            Op::Delete(k) => {
                let got = store.delete(k).unwrap();
                let want = working.remove(k);
                dirty |= want.is_some();
                prop_assert_eq!(got, want);
            }
            Op::Get(k) => prop_assert_eq!(store.get(k).unwrap(), working.get(k).cloned()),
            Op::Range(a, b) => {
                let got = collect(store.range(as_ref(a), as_ref(b)).unwrap());
                prop_assert_eq!(got, pick(&working, |k| in_bounds(k, a, b)));
            }
            Op::Prefix(p) => {
                let got = collect(store.prefix_scan(p).unwrap());
                prop_assert_eq!(got, pick(&working, |k| k.starts_with(p)));
            }
            Op::All => prop_assert_eq!(collect(store.all().unwrap()), pick(&working, |_| true)),
            Op::Commit(with_offset) => {
                let offset = with_offset.then(|| {
                    next_offset += 1;
                    next_offset
                });
                store.commit(offset).unwrap();
                committed = working.clone();
                committed_offset = offset.or(committed_offset);
                dirty = false;
            }
            Op::Abort => {
                store.abort();
                working = committed.clone();
                dirty = false;
            }
            Op::Restore(records) => {
                let recs: Vec<ChangelogRecord<'_>> = records
                    .iter()
                    .map(|(k, v)| ChangelogRecord {
                        key: k,
                        value: v.as_deref(),
                    })
                    .collect();
                next_offset += 1;
                let result = store.restore_batch(&recs, next_offset);
                if dirty {
                    prop_assert!(
                        matches!(result, Err(StoreError::InvalidState { .. })),
                        "restore with open writes must fail: {:?}",
                        result
                    );
                } else {
                    result.unwrap();
                    for (k, v) in records {
                        match v {
                            Some(v) => working.insert(k.clone(), v.clone()),
                            None => working.remove(k),
                        };
                    }
                    committed = working.clone();
                    committed_offset = Some(next_offset);
                }
            }
            Op::Reopen => {
                store.close().unwrap();
                drop(store);
                store = open();
                if !durable {
                    committed.clear();
                    committed_offset = None;
                }
                working = committed.clone();
                dirty = false;
            }
        }
        prop_assert_eq!(store.committed_offset(), committed_offset);
    }
    Ok(())
}

fn rocks(path: &Path) -> RocksDbKeyValueStore {
    let memory = RocksDbMemory::new(&StateConfig {
        memory_budget_bytes: 8 << 20,
        ..StateConfig::default()
    });
    RocksDbKeyValueStore::open(path, "model", &memory).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn in_memory_store_matches_model(ops in prop::collection::vec(op(), 1..80)) {
        run(&ops, || Box::new(InMemoryKeyValueStore::new("model")), false)?;
    }

    #[test]
    fn rocksdb_store_matches_model(ops in prop::collection::vec(op(), 1..80)) {
        let dir = tempfile::tempdir().unwrap();
        run(&ops, || Box::new(rocks(dir.path())), true)?;
    }
}
