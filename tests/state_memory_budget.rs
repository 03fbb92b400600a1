//! The shared RocksDB memory budget: 2M keys with 100-byte values written
//! across 8 stores under a 64 MiB budget, then read back; the process RSS
//! must stay within a bound, and the figures are printed.
//!
//! Bound: budget (64 MiB) + 96 MiB for everything else. The "everything
//! else" is the test binary and allocator (~10 MiB), the overlay of one
//! commit interval per store (8 x 5 000 entries, ~10 MiB), RocksDB's
//! per-instance structures outside the cache (table readers, manifests,
//! thread stacks) and allocator fragmentation. Without the shared budget,
//! eight instances with default options (64 MiB memtables each, a 32 MiB
//! block cache each) would exceed it; so does this test with a 512 MiB
//! budget (measured: peak RSS 325 MiB, block cache 303 MiB).
//!
//! Measured with the 64 MiB budget: peak RSS 101 MiB, block cache 63 MiB,
//! 243 MiB of SST files (values are incompressible).

use weir::state::{KeyValueStore, RocksDbKeyValueStore, RocksDbMemory, StateConfig, StateStore};

const STORES: usize = 8;
const KEYS: usize = 2_000_000;
const VALUE_BYTES: usize = 100;
const COMMIT_EVERY: usize = 5_000;
const BUDGET_BYTES: u64 = 64 << 20;
const BOUND_BYTES: u64 = BUDGET_BYTES + (96 << 20);

/// (current RSS, peak RSS) of this process in bytes, from /proc.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .unwrap()
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Incompressible values (xorshift), so SST files and cached blocks have
/// their real size.
fn fill_random(buf: &mut [u8], state: &mut u64) {
    for chunk in buf.chunks_mut(8) {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

#[test]
fn two_million_keys_in_eight_stores_stay_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StateConfig {
        state_dir: dir.path().to_path_buf(),
        memory_budget_bytes: BUDGET_BYTES,
        ..StateConfig::default()
    };
    let memory = RocksDbMemory::new(&cfg);
    let (rss_start, _) = rss();
    let mut stores: Vec<RocksDbKeyValueStore> = (0..STORES)
        .map(|i| {
            let name = format!("store-{i}");
            RocksDbKeyValueStore::open(&dir.path().join(&name), name, &memory).unwrap()
        })
        .collect();
    let started = std::time::Instant::now();
    let mut value = vec![0u8; VALUE_BYTES];
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut key = Vec::with_capacity(16);
    let per_store = KEYS / STORES;
    for i in 0..per_store {
        for (s, store) in stores.iter_mut().enumerate() {
            key.clear();
            // Spread keys so every flush touches the whole key space.
            key.extend_from_slice(&((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes());
            key.extend_from_slice(&(s as u64).to_be_bytes());
            fill_random(&mut value, &mut rng);
            store.put(&key, &value).unwrap();
        }
        if (i + 1) % COMMIT_EVERY == 0 {
            for store in stores.iter_mut() {
                store.commit(Some(i as i64)).unwrap();
            }
        }
    }
    for store in stores.iter_mut() {
        store.commit(Some(per_store as i64)).unwrap();
    }
    let write_secs = started.elapsed().as_secs_f64();
    // Read back: random point lookups and one full scan per store fill the cache.
    let mut found = 0u64;
    for i in (0..per_store).step_by(97) {
        for (s, store) in stores.iter().enumerate() {
            key.clear();
            key.extend_from_slice(&((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes());
            key.extend_from_slice(&(s as u64).to_be_bytes());
            found += u64::from(store.get(&key).unwrap().is_some());
        }
    }
    let mut scanned = 0u64;
    for store in &stores {
        scanned += store.all().unwrap().count() as u64;
    }
    let usage = memory.usage();
    let memtables: u64 = stores.iter().map(|s| s.backend().memtable_bytes()).sum();
    let sst: u64 = stores.iter().map(|s| s.backend().sst_bytes()).sum();
    let readers: u64 = stores
        .iter()
        .map(|s| s.backend().table_readers_bytes())
        .sum();
    let (rss_now, rss_peak) = rss();
    println!(
        "memory budget test: {KEYS} keys x {VALUE_BYTES} B in {STORES} stores, written in {write_secs:.1} s\n\
         \x20 RSS at start {:.1} MiB, now {:.1} MiB, peak {:.1} MiB (bound {:.0} MiB)\n\
         \x20 RocksDB block cache {:.1} MiB (pinned {:.1} MiB), write buffers {:.1} MiB, \
         memtables {:.1} MiB, table readers outside the cache {:.1} MiB, SST files {:.1} MiB",
        mib(rss_start),
        mib(rss_now),
        mib(rss_peak),
        mib(BOUND_BYTES),
        mib(usage.block_cache_bytes),
        mib(usage.block_cache_pinned_bytes),
        mib(usage.write_buffer_bytes),
        mib(memtables),
        mib(readers),
        mib(sst),
    );
    assert_eq!(scanned, KEYS as u64);
    assert_eq!(found, (per_store.div_ceil(97) * STORES) as u64);
    assert!(
        usage.block_cache_bytes <= BUDGET_BYTES + (8 << 20),
        "block cache {} B over the budget",
        usage.block_cache_bytes
    );
    assert!(
        rss_peak <= BOUND_BYTES,
        "peak RSS {:.1} MiB exceeds the bound {:.1} MiB",
        mib(rss_peak),
        mib(BOUND_BYTES)
    );
}
