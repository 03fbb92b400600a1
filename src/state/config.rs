//! Configuration of the state layer.
//!
//! [`StateConfig`] is one typed struct with documented defaults; units are
//! part of the field names. It deserializes from JSON/TOML-like sources with
//! serde, every field optional (missing fields take the defaults).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Which backend a store uses. Chosen per store; RocksDB is the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreBackend {
    /// RocksDB on local disk: durable, bounded memory, restores only the
    /// changelog tail after a restart.
    #[default]
    RocksDb,
    /// Ordered maps on the heap: fastest, not durable (restored from the
    /// start of the changelog after a restart), memory grows with the data.
    InMemory,
}

/// Configuration of the state layer of one application instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StateConfig {
    /// Root of the state directory; stores live in
    /// `<state_dir>/<application_id>/<task_id>/<store>`.
    /// Default: `<system temp dir>/weir-state`.
    pub state_dir: PathBuf,
    /// Memory for all RocksDB stores of this instance together: the shared
    /// block cache, which memtables, index and filter blocks are charged to.
    /// Default: 64 MiB.
    pub memory_budget_bytes: u64,
    /// Share of `memory_budget_bytes` memtables may take, in percent
    /// (capped at 90). Default: 50.
    pub write_buffer_fraction_percent: u8,
    /// Size of one memtable of one store. Default: 8 MiB.
    pub write_buffer_size_bytes: u64,
    /// Bloom filter bits per key in RocksDB SST files. Default: 10 (about
    /// 1% false positives).
    pub bloom_filter_bits_per_key: u32,
    /// RocksDB data block size. Default: 16 KiB.
    pub block_size_bytes: u64,
    /// Size of the record cache in front of each cached store, in bytes of
    /// keys and values plus a fixed per-entry overhead; 0 disables caching
    /// (every update goes downstream and to the changelog). Default: 10 MiB.
    pub cache_max_bytes: u64,
    /// How long the directory of a task this instance no longer owns is
    /// kept before [`StateDirectory::clean_unowned`](super::StateDirectory::clean_unowned)
    /// removes it, in milliseconds. Default: 600 000 (10 minutes).
    pub cleanup_delay_ms: u64,
    /// Backend for stores that do not choose one. Default: RocksDB.
    pub default_backend: StoreBackend,
    /// Whether a RocksDB store writes each commit's batch on a background
    /// thread while the stream thread goes on (see
    /// [`rocks`](super::RocksDbBackend)). Default: true.
    pub background_commit_writes: bool,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            state_dir: std::env::temp_dir().join("weir-state"),
            memory_budget_bytes: 64 << 20,
            write_buffer_fraction_percent: 50,
            write_buffer_size_bytes: 8 << 20,
            bloom_filter_bits_per_key: 10,
            block_size_bytes: 16 << 10,
            cache_max_bytes: 10 << 20,
            cleanup_delay_ms: 600_000,
            default_backend: StoreBackend::RocksDb,
            background_commit_writes: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_fields_take_defaults() {
        let c: StateConfig =
            serde_json::from_str(r#"{"cache_max_bytes": 0, "default_backend": "in_memory"}"#)
                .unwrap();
        assert_eq!(c.cache_max_bytes, 0);
        assert_eq!(c.default_backend, StoreBackend::InMemory);
        assert_eq!(c.memory_budget_bytes, 64 << 20);
    }
}
