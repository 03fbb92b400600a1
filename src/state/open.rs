//! Opening a store on the backend its configuration chooses (RocksDB or in
//! memory). Kept apart from the store types so the generic stores do not
//! depend on the backends that instantiate them.

use std::path::Path;

use super::{
    KeyValueStore, KvStore, MemoryBackend, RocksDbBackend, RocksDbMemory, SegmentedSessionStore,
    SegmentedWindowStore, SessionStore, StoreBackend, StoreError, WindowStore,
};

/// Opens a key-value store on the backend chosen for it: RocksDB in `path`
/// with the shared `memory` budget, or in memory (then `path` and `memory`
/// are unused).
pub fn open_key_value_store(
    backend: StoreBackend,
    path: &Path,
    name: &str,
    memory: &RocksDbMemory,
) -> Result<Box<dyn KeyValueStore>, StoreError> {
    Ok(match backend {
        StoreBackend::RocksDb => Box::new(KvStore::<RocksDbBackend>::open(path, name, memory)?),
        StoreBackend::InMemory => Box::new(KvStore::<MemoryBackend>::new(name)),
    })
}

/// Opens a window store on the backend chosen for it, as
/// [`open_key_value_store`] does for key-value
/// stores: RocksDB in `path` with the shared `memory` budget, or in memory
/// (then `path` and `memory` are unused).
pub fn open_window_store(
    backend: StoreBackend,
    path: &Path,
    name: &str,
    memory: &RocksDbMemory,
    retention_ms: i64,
    segment_interval_ms: i64,
) -> Result<Box<dyn WindowStore>, StoreError> {
    Ok(match backend {
        StoreBackend::RocksDb => Box::new(SegmentedWindowStore::<RocksDbBackend>::open(
            path,
            name,
            memory,
            retention_ms,
            segment_interval_ms,
        )?),
        StoreBackend::InMemory => Box::new(SegmentedWindowStore::<MemoryBackend>::new(
            name,
            retention_ms,
            segment_interval_ms,
        )?),
    })
}

/// Opens a session store on the backend chosen for it, as
/// [`open_key_value_store`] does for key-value
/// stores: RocksDB in `path` with the shared `memory` budget, or in memory
/// (then `path` and `memory` are unused).
pub fn open_session_store(
    backend: StoreBackend,
    path: &Path,
    name: &str,
    memory: &RocksDbMemory,
    retention_ms: i64,
    segment_interval_ms: i64,
) -> Result<Box<dyn SessionStore>, StoreError> {
    Ok(match backend {
        StoreBackend::RocksDb => Box::new(SegmentedSessionStore::<RocksDbBackend>::open(
            path,
            name,
            memory,
            retention_ms,
            segment_interval_ms,
        )?),
        StoreBackend::InMemory => Box::new(SegmentedSessionStore::<MemoryBackend>::new(
            name,
            retention_ms,
            segment_interval_ms,
        )?),
    })
}
