//! Crash tests: a child process (this test binary re-executed in child mode)
//! writes and commits batches to RocksDB stores and is killed with SIGKILL,
//! without closing anything. Reopened, the stores must hold exactly the
//! state of a completed commit and report its changelog offset: the last
//! one the child reported, or, with background commit writes (the
//! default), the one before it when the last one's write was still in
//! flight (each commit waits for its store's previous write, so at most
//! one is; the runtime restores the rest from the changelog).
//!
//! Batches are deterministic functions of their number, so the parent
//! recomputes the expected state with the in-memory stores.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use weir::state::{
    ChangelogRecord, InMemoryKeyValueStore, InMemoryWindowStore, KeyValueStore,
    RocksDbKeyValueStore, RocksDbMemory, RocksDbWindowStore, StateConfig, StateDirectory,
    StateStore, WindowStore,
};

const CHILD_ENV: &str = "WEIR_STATE_CRASH_CHILD";
const RETENTION_MS: i64 = 500;
const SEGMENT_MS: i64 = 100;

fn config(dir: &Path) -> StateConfig {
    StateConfig {
        state_dir: dir.to_path_buf(),
        memory_budget_bytes: 16 << 20,
        ..StateConfig::default()
    }
}

/// Writes batch `b`: puts, overwrites and deletes of a key-value store and
/// window puts plus expiry.
fn write_batch(kv: &mut dyn KeyValueStore, win: &mut dyn WindowStore, b: i64) {
    for i in 0..300i64 {
        let k = format!("key-{:05}", (b * 37 + i * 13) % 2000);
        kv.put(k.as_bytes(), format!("value-{b}-{i}").as_bytes())
            .unwrap();
    }
    for i in 0..20i64 {
        kv.delete(format!("key-{:05}", (b * 101 + i * 7) % 2000).as_bytes())
            .unwrap();
    }
    for i in 0..10i64 {
        let start = b * 40 + i * 10;
        win.put(
            format!("w{}", i % 4).as_bytes(),
            start,
            Some(format!("{b}").as_bytes()),
        )
        .unwrap();
    }
    win.expire(b * 40).unwrap();
}

/// Changelog batch `b` for the restore crash test: 1 000 records of 1 KiB
/// (so memtables fill and RocksDB flushes during the restore) and some
/// tombstones.
fn restore_records(b: i64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    for i in 0..1_000i64 {
        let k = format!("key-{:05}", (b * 37 + i * 13) % 5_000);
        out.push((k.into_bytes(), Some(vec![(b + i) as u8; 1024])));
    }
    for i in 0..50i64 {
        out.push((
            format!("key-{:05}", (b * 101 + i * 7) % 5_000).into_bytes(),
            None,
        ));
    }
    out
}

fn expected(batches: i64) -> (InMemoryKeyValueStore, InMemoryWindowStore) {
    let mut kv = InMemoryKeyValueStore::new("kv");
    let mut win = InMemoryWindowStore::new("win", RETENTION_MS, SEGMENT_MS).unwrap();
    for b in 1..=batches {
        write_batch(&mut kv, &mut win, b);
        kv.commit(Some(b)).unwrap();
        win.commit(Some(b)).unwrap();
    }
    (kv, win)
}

fn open(
    dir: &mut StateDirectory,
    mem: &RocksDbMemory,
) -> (RocksDbKeyValueStore, RocksDbWindowStore) {
    let kv = RocksDbKeyValueStore::open(&dir.store_dir("0_0", "kv").unwrap(), "kv", mem).unwrap();
    let win_dir = dir.store_dir("0_0", "win").unwrap();
    let win = RocksDbWindowStore::open(&win_dir, "win", mem, RETENTION_MS, SEGMENT_MS).unwrap();
    (kv, win)
}

/// The child: commits `WEIR_STATE_CRASH_BATCHES` batches (or forever when
/// 0), reporting each, then leaves one batch uncommitted and waits to be
/// killed. Runs only when the parent sets the env var.
#[test]
fn crash_child_entry_point() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return; // not a child: the real tests are below
    };
    let batches: i64 = std::env::var("WEIR_STATE_CRASH_BATCHES")
        .unwrap()
        .parse()
        .unwrap();
    let mut cfg = config(Path::new(&dir));
    cfg.background_commit_writes =
        std::env::var("WEIR_STATE_CRASH_MODE").as_deref() != Ok("inline");
    let mem = RocksDbMemory::new(&cfg);
    let mut sd = StateDirectory::open(&cfg, "app").unwrap();
    let (mut kv, mut win) = open(&mut sd, &mem);
    if std::env::var("WEIR_STATE_CRASH_MODE").as_deref() == Ok("restore") {
        for b in 1.. {
            let records = restore_records(b);
            let recs: Vec<ChangelogRecord<'_>> = records
                .iter()
                .map(|(k, v)| ChangelogRecord {
                    key: k,
                    value: v.as_deref(),
                })
                .collect();
            kv.restore_batch(&recs, b).unwrap();
            println!("restored {b}");
        }
    }
    let mut b = 0;
    while batches == 0 || b < batches {
        b += 1;
        write_batch(&mut kv, &mut win, b);
        kv.commit(Some(b)).unwrap();
        win.commit(Some(b)).unwrap();
        println!("committed {b}");
    }
    // An open transaction: overwrite and delete committed keys, add new ones.
    write_batch(&mut kv, &mut win, 10_000);
    kv.put(b"uncommitted", b"must not survive").unwrap();
    println!("uncommitted written");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Runs the child until it prints `until`, kills it with SIGKILL, and
/// returns the last batch it reported committed.
fn run_child(dir: &Path, batches: i64, until: &str) -> i64 {
    run_child_mode(dir, batches, until, "commit")
}

fn run_child_mode(dir: &Path, batches: i64, until: &str, mode: &str) -> i64 {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "crash_child_entry_point",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .env("WEIR_STATE_CRASH_BATCHES", batches.to_string())
        .env("WEIR_STATE_CRASH_MODE", mode)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut last = 0;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(n) = line
            .strip_prefix("committed ")
            .or_else(|| line.strip_prefix("restored "))
        {
            last = n.parse().unwrap();
        }
        if line == until {
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL on Unix: no destructors, no flush
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "child was killed, not finished: {status:?}"
    );
    last
}

fn assert_state(dir: &Path, at_least: i64) -> i64 {
    let cfg = config(dir);
    let mem = RocksDbMemory::new(&cfg);
    let mut sd = StateDirectory::open(&cfg, "app").expect("the killed child's lock is released");
    let (kv, win) = open(&mut sd, &mem);
    let offset = kv.committed_offset().expect("a committed offset");
    assert!(
        offset >= at_least,
        "reopened at offset {offset}, below {at_least}"
    );
    let (want_kv, want_win) = expected(offset);
    let got: Vec<_> = kv.all().unwrap().map(Result::unwrap).collect();
    let want: Vec<_> = want_kv.all().unwrap().map(Result::unwrap).collect();
    assert_eq!(
        got.len(),
        want.len(),
        "key-value entry count at offset {offset}"
    );
    assert!(
        got == want,
        "key-value store differs from the state of commit {offset}"
    );
    assert_eq!(kv.get(b"uncommitted").unwrap(), None);
    let win_offset = win.committed_offset().expect("a committed window offset");
    // The child commits the key-value store first, then the window store:
    // a kill between the two leaves the window store one commit behind.
    assert!(
        win_offset == offset || win_offset + 1 == offset,
        "window store at {win_offset}, key-value store at {offset}"
    );
    let (_, want_win) = if win_offset == offset {
        (want_kv, want_win)
    } else {
        expected(win_offset)
    };
    let got: Vec<_> = win
        .fetch_all(i64::MIN, i64::MAX)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let want: Vec<_> = want_win
        .fetch_all(i64::MIN, i64::MAX)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(!want.is_empty());
    assert!(
        got == want,
        "window store differs from the state of commit {win_offset}"
    );
    offset
}

#[test]
fn killed_with_an_open_transaction_reopens_at_the_last_commit() {
    let dir = tempfile::tempdir().unwrap();
    let last = run_child(dir.path(), 25, "uncommitted written");
    assert_eq!(last, 25);
    // The last commit's write may still have been in flight.
    let offset = assert_state(dir.path(), 24);
    assert!(offset <= 25, "reopened at {offset}, past the last commit");
}

#[test]
fn killed_with_an_open_transaction_after_inline_commits_reopens_at_the_last_commit() {
    let dir = tempfile::tempdir().unwrap();
    // Without background writes a commit has landed when it returns.
    let last = run_child_mode(dir.path(), 25, "uncommitted written", "inline");
    assert_eq!(last, 25);
    assert_eq!(assert_state(dir.path(), 25), 25);
}

#[test]
fn killed_while_committing_reopens_at_a_complete_commit() {
    let dir = tempfile::tempdir().unwrap();
    // The child keeps committing; the kill lands at an arbitrary point,
    // often inside a commit or with the last one's write in flight.
    let last = run_child(dir.path(), 0, "committed 40");
    let offset = assert_state(dir.path(), last - 1);
    eprintln!("last reported commit {last}, reopened at {offset}");
}

#[test]
fn killed_while_restoring_reopens_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let last = run_child_mode(dir.path(), 0, "restored 40", "restore");
    assert!(last >= 40);
    let cfg = config(dir.path());
    let mem = RocksDbMemory::new(&cfg);
    let mut sd = StateDirectory::open(&cfg, "app").unwrap();
    let (kv, _win) = open(&mut sd, &mem);
    // Restore batches are not flushed one by one: the store may be behind
    // the last reported batch, but its data must match its offset exactly.
    let offset = kv.committed_offset().unwrap_or(0);
    assert!(offset <= last + 1, "offset {offset} ahead of the restore");
    let mut want = std::collections::BTreeMap::new();
    for b in 1..=offset {
        for (k, v) in restore_records(b) {
            match v {
                Some(v) => want.insert(k, v),
                None => want.remove(&k),
            };
        }
    }
    let got: std::collections::BTreeMap<_, _> = kv.all().unwrap().map(Result::unwrap).collect();
    assert_eq!(
        got.len(),
        want.len(),
        "entry count at restore offset {offset}"
    );
    assert!(
        got == want,
        "restored data differs from the changelog up to {offset}"
    );
    eprintln!("last reported restore batch {last}, reopened at {offset}");
    assert!(
        offset > 0,
        "memtables filled during the restore, so some batches were flushed"
    );
}
