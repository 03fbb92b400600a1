//! The RocksDB backend, configured for state that a changelog backs.
//!
//! One RocksDB instance per store, in the store's directory
//! (`<state_dir>/<application_id>/<task_id>/<store>`, see [`dir`](super::dir)).
//! Column families:
//!
//! * `default`: the data of a key-value store;
//! * `segment-<n>`: one per time segment of a window or session store, so
//!   expiry drops a whole column family instead of deleting keys;
//! * `weir-meta`: the committed changelog offset and the lowest live segment.
//!
//! Configuration and why:
//!
//! * **Commits go through the WAL, unsynced.** [`Backend::apply`] writes
//!   one `WriteBatch` (data and the changelog offset in the metadata column
//!   family together) with RocksDB's write-ahead log on and `sync` off: the
//!   write is an append to the log file in the OS page cache, so a commit
//!   costs no memtable flush and creates no small SST file. A killed process
//!   loses no batch written (the kernel still writes the page cache out;
//!   for one still in flight see the next point), and RocksDB
//!   replays the log on open. A machine crash may lose the log's unsynced
//!   tail; RocksDB's default point-in-time recovery then stops at the last
//!   complete batch, and since each batch holds its own offset the store
//!   still reports the offset that matches its data (the restore reads the
//!   rest from the changelog). Nothing that was not committed ever reaches
//!   RocksDB (open writes stay in the store's overlay), so a crash never
//!   leaves uncommitted data behind.
//! * **Commit writes in the background** (`background_commit_writes` in
//!   [`StateConfig`], on by default). The stream thread builds the batch;
//!   one writer thread per [`RocksDbMemory`] writes it, while the stream
//!   thread goes on with the next commit interval. Its transaction has
//!   committed by then, so the batch holds committed data only; until it
//!   lands, reads take its writes from the store's pending overlay (see
//!   [`Backend::in_flight`]). The next commit, a restore, `close` and drop
//!   wait for it first. A crash before it lands loses only the local copy:
//!   the store reports the previous offset and restores the rest from the
//!   changelog.
//!   Restore batches skip the WAL (the changelog already holds every byte):
//!   a crash during a restore loses at most the unflushed tail of the
//!   restore (RocksDB flushes memtables as they fill, atomically across
//!   column families as `atomic_flush` is on), and the store still reports
//!   the offset that matches its data. Before the first logged write after
//!   such batches, the backend flushes them, so a replayed log never lands
//!   on top of lost restore data.
//! * **Bloom filters** (`bloom_filter_bits_per_key` in
//!   [`StateConfig`](super::StateConfig)) so point lookups of absent keys
//!   skip SST files.
//! * **One memory budget per instance**: every store of the process shares
//!   one LRU block cache ([`RocksDbMemory`]); memtables are charged to the
//!   same cache through a write-buffer manager, and index and filter blocks
//!   live in the cache too, so `memory_budget_bytes` bounds RocksDB's memory
//!   whatever the number of stores.
//!
//! All calls block; the runtime makes them from its stream threads.
//!
//! ```
//! use weir::state::{KeyValueStore, RocksDbKeyValueStore, RocksDbMemory, StateConfig, StateStore};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let memory = RocksDbMemory::new(&StateConfig::default()); // one per process
//! let mut store = RocksDbKeyValueStore::open(dir.path(), "counts", &memory).unwrap();
//! store.put(b"k", b"v").unwrap();
//! store.commit(Some(41)).unwrap(); // data and offset 41, in the WAL
//! drop(store);
//! let store = RocksDbKeyValueStore::open(dir.path(), "counts", &memory).unwrap();
//! assert_eq!(store.committed_offset(), Some(41)); // restore from offset 42 on
//! assert_eq!(store.get(b"k").unwrap(), Some(b"v".to_vec()));
//! ```

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, mpsc};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DB, DBCompressionType, FlushOptions, Options,
    ReadOptions, WriteBatch, WriteBufferManager, WriteOptions,
};

use super::backend::{Backend, Core, Meta, Write, decode_i64, empty_bounds};
use super::{KvIter, KvStore, StateConfig, StoreError};

const META_CF: &str = "weir-meta";
const DATA_CF: &str = "default";
const SEGMENT_PREFIX: &str = "segment-";
const OFFSET_KEY: &[u8] = b"changelog-offset";
const MIN_LIVE_KEY: &[u8] = b"min-live-segment";

/// The memory shared by all RocksDB stores of one instance: one block cache
/// and one write-buffer manager charged to it. Create one per process from
/// [`StateConfig`] and pass it to every store you open.
#[derive(Clone)]
pub struct RocksDbMemory {
    cache: Cache,
    write_buffers: WriteBufferManager,
    config: StateConfig,
    writer: BackgroundWriter,
}

/// Work for the background writer.
type Job = Box<dyn FnOnce() + Send>;

/// The thread that writes committed batches of every store opened with one
/// [`RocksDbMemory`] (see the module docs), started with the first batch;
/// it ends when the memory and its stores are dropped.
#[derive(Clone, Default)]
struct BackgroundWriter {
    jobs: Arc<OnceLock<Option<mpsc::Sender<Job>>>>,
}

impl BackgroundWriter {
    /// Runs `job` on the writer thread, or here when no thread could be
    /// started.
    fn submit(&self, job: Job) {
        let jobs = self.jobs.get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            let spawned = std::thread::Builder::new()
                .name("weir-store-writer".into())
                .spawn(move || {
                    for job in rx {
                        // A panicking job drops its reply; the store reports it.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                });
            match spawned {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::warn!(error = %e, "no store writer thread; commits write inline");
                    None
                }
            }
        });
        match jobs {
            Some(tx) => {
                if let Err(mpsc::SendError(job)) = tx.send(job) {
                    job();
                }
            }
            None => job(),
        }
    }
}

// The budget is shared by the stream threads of one instance.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<RocksDbMemory>();
};

/// A snapshot of RocksDB's memory use across the stores of one
/// [`RocksDbMemory`], in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RocksDbMemoryUsage {
    /// Bytes in the shared block cache (data, index and filter blocks, and
    /// the memtable reservations charged to it).
    pub block_cache_bytes: u64,
    /// Bytes of the block cache pinned by open iterators and readers.
    pub block_cache_pinned_bytes: u64,
    /// Bytes of memtables counted by the write-buffer manager.
    pub write_buffer_bytes: u64,
}

impl RocksDbMemory {
    /// Creates the shared cache and write-buffer manager: the cache holds
    /// `memory_budget_bytes`, of which memtables may use
    /// `write_buffer_fraction_percent`.
    pub fn new(config: &StateConfig) -> Self {
        let budget = config.memory_budget_bytes.max(1 << 20) as usize;
        let cache = Cache::new_lru_cache(budget);
        let write_budget = budget / 100 * config.write_buffer_fraction_percent.min(90) as usize;
        let write_buffers = WriteBufferManager::new_write_buffer_manager_with_cache(
            write_budget,
            false,
            cache.clone(),
        );
        RocksDbMemory {
            cache,
            write_buffers,
            config: config.clone(),
            writer: BackgroundWriter::default(),
        }
    }

    /// Current memory use of all stores opened with this budget.
    pub fn usage(&self) -> RocksDbMemoryUsage {
        RocksDbMemoryUsage {
            block_cache_bytes: self.cache.get_usage() as u64,
            block_cache_pinned_bytes: self.cache.get_pinned_usage() as u64,
            write_buffer_bytes: self.write_buffers.get_usage() as u64,
        }
    }

    fn options(&self) -> Options {
        let c = &self.config;
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&self.cache);
        table.set_bloom_filter(c.bloom_filter_bits_per_key as f64, false);
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        table.set_block_size(c.block_size_bytes as usize);
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_atomic_flush(true);
        opts.set_block_based_table_factory(&table);
        opts.set_write_buffer_manager(&self.write_buffers);
        opts.set_write_buffer_size(c.write_buffer_size_bytes as usize);
        opts.set_max_write_buffer_number(2);
        opts.set_compression_type(DBCompressionType::Lz4);
        opts.set_keep_log_file_num(2);
        // After a kill the commits since the last memtable flush are
        // replayed from the WAL at the next open. By default RocksDB then
        // writes them to a level-0 file before the open returns, which
        // doubled the open of a 250,000-key store (50-60 ms against 28-30
        // ms); the replayed memtables are flushed later, as any other.
        // Not settable through the crate's builder: set from an options
        // string, which copies everything above.
        opts.get_options_from_string("avoid_flush_during_recovery=true")
            .expect("a valid RocksDB option")
    }
}

impl std::fmt::Debug for RocksDbMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDbMemory")
            .field("usage", &self.usage())
            .finish()
    }
}

/// Committed data of one store in its own RocksDB instance.
pub struct RocksDbBackend {
    name: String,
    path: PathBuf,
    /// Shared with the background writer while a batch is in flight.
    db: Arc<DB>,
    opts: Options,
    segmented: bool,
    segments: BTreeSet<i64>,
    meta: Meta,
    /// Restore batches were written without the WAL and not flushed yet.
    unlogged: bool,
    /// Writes commit batches in the background when set.
    writer: Option<BackgroundWriter>,
    /// The outcome of the batch in flight.
    in_flight: Option<mpsc::Receiver<Result<(), rocksdb::Error>>>,
}

fn segment_cf(segment: i64) -> String {
    format!("{SEGMENT_PREFIX}{segment}")
}

fn read_i64(store: &str, bytes: &[u8]) -> Result<i64, StoreError> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| StoreError::Corrupt {
        store: store.to_string(),
        message: format!(
            "metadata value has {} bytes, expected 8; delete the store directory to restore it from its changelog",
            bytes.len()
        ),
    })?;
    Ok(decode_i64(&arr))
}

impl RocksDbBackend {
    /// Opens (creating if needed) the RocksDB instance at `path` for the
    /// store `name`. `segmented` selects the window/session layout (one
    /// column family per segment) over the key-value layout.
    pub fn open(
        path: &Path,
        name: &str,
        memory: &RocksDbMemory,
        segmented: bool,
    ) -> Result<Self, StoreError> {
        std::fs::create_dir_all(path).map_err(|e| StoreError::io(path, e))?;
        let opts = memory.options();
        let existing = if path.join("CURRENT").exists() {
            DB::list_cf(&opts, path).map_err(|e| StoreError::rocks(name, e))?
        } else {
            Vec::new()
        };
        let mut names: BTreeSet<String> = existing.into_iter().collect();
        names.insert(DATA_CF.to_string());
        names.insert(META_CF.to_string());
        let mut segments = BTreeSet::new();
        for n in &names {
            if let Some(s) = n.strip_prefix(SEGMENT_PREFIX) {
                let seg = s.parse::<i64>().map_err(|_| StoreError::Corrupt {
                    store: name.to_string(),
                    message: format!("unexpected column family '{n}' in {}", path.display()),
                })?;
                segments.insert(seg);
            }
        }
        let descriptors = names
            .iter()
            .map(|n| ColumnFamilyDescriptor::new(n, opts.clone()));
        let opening = std::time::Instant::now();
        let db = DB::open_cf_descriptors(&opts, path, descriptors)
            .map_err(|e| StoreError::rocks(name, e))?;
        tracing::debug!(
            store = name,
            elapsed_us = opening.elapsed().as_micros() as u64,
            "rocksdb opened"
        );
        let mut backend = RocksDbBackend {
            name: name.to_string(),
            path: path.to_path_buf(),
            db: Arc::new(db),
            opts,
            segmented,
            segments,
            meta: Meta::default(),
            unlogged: false,
            writer: memory
                .config
                .background_commit_writes
                .then(|| memory.writer.clone()),
            in_flight: None,
        };
        backend.meta = backend.read_meta()?;
        // A crash between the flush of a commit and the drop of its expired
        // segments leaves them behind; drop them now.
        backend.drop_expired()?;
        Ok(backend)
    }

    /// The directory of this RocksDB instance.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of this instance's memtables (`rocksdb.cur-size-all-mem-tables`).
    pub fn memtable_bytes(&self) -> u64 {
        self.db
            .property_int_value("rocksdb.cur-size-all-mem-tables")
            .ok()
            .flatten()
            .unwrap_or(0)
    }

    /// Bytes of index and filter blocks held outside the block cache
    /// (`rocksdb.estimate-table-readers-mem`; near 0 here, as they are
    /// cached and so charged to the budget).
    pub fn table_readers_bytes(&self) -> u64 {
        self.cf_names()
            .iter()
            .filter_map(|n| self.db.cf_handle(n))
            .filter_map(|cf| {
                self.db
                    .property_int_value_cf(cf, "rocksdb.estimate-table-readers-mem")
                    .ok()
                    .flatten()
            })
            .sum()
    }

    /// Bytes of this instance's SST files (`rocksdb.total-sst-files-size`).
    pub fn sst_bytes(&self) -> u64 {
        self.cf_names()
            .iter()
            .filter_map(|n| self.db.cf_handle(n))
            .filter_map(|cf| {
                self.db
                    .property_int_value_cf(cf, "rocksdb.total-sst-files-size")
                    .ok()
                    .flatten()
            })
            .sum()
    }

    fn read_meta(&self) -> Result<Meta, StoreError> {
        let cf = self
            .db
            .cf_handle(META_CF)
            .expect("meta column family is opened");
        let get = |k: &[u8]| -> Result<Option<i64>, StoreError> {
            match self
                .db
                .get_pinned_cf(cf, k)
                .map_err(|e| StoreError::rocks(&self.name, e))?
            {
                Some(v) => Ok(Some(read_i64(&self.name, &v)?)),
                None => Ok(None),
            }
        };
        Ok(Meta {
            changelog_offset: get(OFFSET_KEY)?,
            min_live_segment: get(MIN_LIVE_KEY)?.unwrap_or(i64::MIN),
        })
    }

    fn cf_name(&self, segment: i64) -> Cow<'static, str> {
        if self.segmented {
            Cow::Owned(segment_cf(segment))
        } else {
            Cow::Borrowed(DATA_CF)
        }
    }

    /// The database for changing column families: none may be in flight.
    fn db_mut(&mut self) -> Result<&mut DB, StoreError> {
        self.finish_in_flight()?;
        Arc::get_mut(&mut self.db).ok_or_else(|| StoreError::InvalidState {
            store: self.name.clone(),
            message: "the store's background writer still holds it".into(),
        })
    }

    /// Waits for the batch in flight, if any.
    fn finish_in_flight(&mut self) -> Result<(), StoreError> {
        let Some(reply) = self.in_flight.take() else {
            return Ok(());
        };
        match reply.recv() {
            Ok(result) => result.map_err(|e| StoreError::rocks(&self.name, e)),
            Err(_) => Err(StoreError::InvalidState {
                store: self.name.clone(),
                message: "the background write of a commit failed without a result; \
                          the store restores it from its changelog after a restart"
                    .into(),
            }),
        }
    }

    fn cf_names(&self) -> Vec<String> {
        let mut names = vec![DATA_CF.to_string(), META_CF.to_string()];
        names.extend(self.segments.iter().map(|s| segment_cf(*s)));
        names
    }

    fn drop_expired(&mut self) -> Result<(), StoreError> {
        let expired: Vec<i64> = self
            .segments
            .range(..self.meta.min_live_segment)
            .copied()
            .collect();
        for seg in expired {
            self.db_mut()?
                .drop_cf(&segment_cf(seg))
                .map_err(|e| StoreError::rocks(&self.name, e))?;
            self.segments.remove(&seg);
        }
        Ok(())
    }
}

impl Backend for RocksDbBackend {
    fn get(&self, segment: i64, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let Some(cf) = self.db.cf_handle(&self.cf_name(segment)) else {
            return Ok(None);
        };
        self.db
            .get_pinned_cf(cf, key)
            .map(|v| v.map(|v| v.to_vec()))
            .map_err(|e| StoreError::rocks(&self.name, e))
    }

    fn range<'a>(
        &'a self,
        segment: i64,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
    ) -> Result<KvIter<'a>, StoreError> {
        let Some(cf) = self.db.cf_handle(&self.cf_name(segment)) else {
            return Ok(Box::new(std::iter::empty()));
        };
        if empty_bounds(from, to) {
            return Ok(Box::new(std::iter::empty()));
        }
        let mut ro = ReadOptions::default();
        let mut skip = None;
        match from {
            Bound::Included(k) => ro.set_iterate_lower_bound(k.to_vec()),
            Bound::Excluded(k) => {
                ro.set_iterate_lower_bound(k.to_vec());
                skip = Some(k.to_vec());
            }
            Bound::Unbounded => {}
        }
        match to {
            Bound::Included(k) => {
                let mut upper = k.to_vec();
                upper.push(0);
                ro.set_iterate_upper_bound(upper);
            }
            Bound::Excluded(k) => ro.set_iterate_upper_bound(k.to_vec()),
            Bound::Unbounded => {}
        }
        Ok(Box::new(RocksIter {
            raw: self.db.raw_iterator_cf_opt(cf, ro),
            store: &self.name,
            skip,
            started: false,
            done: false,
        }))
    }

    fn segments(&self) -> Vec<i64> {
        if self.segmented {
            self.segments.iter().copied().collect()
        } else {
            vec![0]
        }
    }

    fn meta(&self) -> Meta {
        self.meta
    }

    fn apply(
        &mut self,
        writes: &mut dyn Iterator<Item = Write<'_>>,
        meta: Meta,
        durable: bool,
    ) -> Result<(), StoreError> {
        self.finish_in_flight()?;
        self.drop_expired()?;
        let mut batch = WriteBatch::default();
        // Writes come in segment order: one column family lookup per segment.
        let mut current: Option<(i64, &rocksdb::ColumnFamily)> = None;
        for (segment, key, value) in writes {
            let cf = match current {
                Some((s, cf)) if s == segment => cf,
                _ => {
                    let name = self.cf_name(segment);
                    if self.db.cf_handle(&name).is_none() {
                        let opts = self.opts.clone();
                        self.db_mut()?
                            .create_cf(&*name, &opts)
                            .map_err(|e| StoreError::rocks(&self.name, e))?;
                        self.segments.insert(segment);
                    }
                    let cf = self.db.cf_handle(&name).expect("created above");
                    current = Some((segment, cf));
                    cf
                }
            };
            match value {
                Some(v) => batch.put_cf(cf, key, v),
                None => batch.delete_cf(cf, key),
            }
        }
        let meta_cf = self
            .db
            .cf_handle(META_CF)
            .expect("meta column family is opened");
        match meta.changelog_offset {
            Some(o) => batch.put_cf(meta_cf, OFFSET_KEY, super::backend::encode_i64(o)),
            None => batch.delete_cf(meta_cf, OFFSET_KEY),
        }
        batch.put_cf(
            meta_cf,
            MIN_LIVE_KEY,
            super::backend::encode_i64(meta.min_live_segment),
        );
        // Restore batches skip the WAL; a logged write must not follow them
        // before they are flushed (see the module docs), so the first
        // durable write after them goes the same way and flushes.
        let logged = durable && !self.unlogged;
        let mut wo = WriteOptions::default();
        wo.disable_wal(!logged);
        match (&self.writer, logged) {
            (Some(writer), true) => {
                let (reply, result) = mpsc::sync_channel(1);
                let db = Arc::clone(&self.db);
                writer.submit(Box::new(move || {
                    let written = db.write_opt(batch, &wo);
                    // Released before the reply, so that `db_mut` finds
                    // the database unshared once the reply arrived.
                    drop(db);
                    let _ = reply.send(written);
                }));
                self.in_flight = Some(result);
            }
            _ => self
                .db
                .write_opt(batch, &wo)
                .map_err(|e| StoreError::rocks(&self.name, e))?,
        }
        if durable && !logged {
            let names = self.cf_names();
            let cfs: Vec<_> = names.iter().filter_map(|n| self.db.cf_handle(n)).collect();
            let mut fo = FlushOptions::default();
            fo.set_wait(true);
            self.db
                .flush_cfs_opt(&cfs, &fo)
                .map_err(|e| StoreError::rocks(&self.name, e))?;
        }
        self.unlogged = !durable;
        self.meta = meta;
        if self.in_flight.is_none() {
            self.drop_expired()?;
        }
        Ok(())
    }

    fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    fn wait(&mut self) -> Result<(), StoreError> {
        self.finish_in_flight()?;
        self.drop_expired()
    }

    fn approximate_num_entries(&self) -> Result<u64, StoreError> {
        let mut total = 0;
        for n in self.cf_names().iter().filter(|n| *n != META_CF) {
            if let Some(cf) = self.db.cf_handle(n) {
                total += self
                    .db
                    .property_int_value_cf(cf, "rocksdb.estimate-num-keys")
                    .map_err(|e| StoreError::rocks(&self.name, e))?
                    .unwrap_or(0);
            }
        }
        Ok(total)
    }
}

impl Drop for RocksDbBackend {
    /// Waits for the batch in flight, so the database is closed (and its
    /// lock released) when the drop returns.
    fn drop(&mut self) {
        if let Err(e) = self.finish_in_flight() {
            tracing::warn!(store = %self.name, error = %e, "background commit write failed");
        }
    }
}

/// A lazy iterator over one column family within bounds.
struct RocksIter<'a> {
    raw: rocksdb::DBRawIteratorWithThreadMode<'a, DB>,
    store: &'a str,
    skip: Option<Vec<u8>>,
    started: bool,
    done: bool,
}

impl Iterator for RocksIter<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done {
                return None;
            }
            if self.started {
                self.raw.next();
            } else {
                self.raw.seek_to_first();
                self.started = true;
            }
            if !self.raw.valid() {
                self.done = true;
                return match self.raw.status() {
                    Ok(()) => None,
                    Err(e) => Some(Err(StoreError::rocks(self.store, e))),
                };
            }
            let key = self.raw.key().expect("valid iterator");
            if self.skip.as_deref() == Some(key) {
                continue;
            }
            let value = self.raw.value().expect("valid iterator");
            return Some(Ok((key.to_vec(), value.to_vec())));
        }
    }
}

/// A key-value store in RocksDB. See [`KvStore`] for the API.
pub type RocksDbKeyValueStore = KvStore<RocksDbBackend>;

impl KvStore<RocksDbBackend> {
    /// Opens the key-value store `name` whose RocksDB instance lives in
    /// `path` (usually [`StateDirectory::store_dir`](super::StateDirectory::store_dir)),
    /// using the shared `memory` budget. Committed data and its changelog
    /// offset survive restarts.
    pub fn open(
        path: &Path,
        name: impl Into<String>,
        memory: &RocksDbMemory,
    ) -> Result<Self, StoreError> {
        let name = name.into();
        let backend = RocksDbBackend::open(path, &name, memory, false)?;
        Ok(KvStore::with_backend(Core::new(name, backend)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{KeyValueStore, StateStore};

    /// Occupies the memory's writer thread until the returned sender is
    /// dropped, so the next commit stays in flight.
    fn hold_writer(memory: &RocksDbMemory) -> mpsc::Sender<()> {
        let (release, held) = mpsc::channel::<()>();
        let (started, running) = mpsc::channel();
        memory.writer.submit(Box::new(move || {
            let _ = started.send(());
            let _ = held.recv();
        }));
        running.recv().unwrap();
        release
    }

    fn all(store: &RocksDbKeyValueStore) -> Vec<(String, String)> {
        store
            .all()
            .unwrap()
            .map(|kv| {
                let (k, v) = kv.unwrap();
                (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap())
            })
            .collect()
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reads_see_a_commit_whose_write_is_still_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let memory = RocksDbMemory::new(&StateConfig::default());
        let mut store = RocksDbKeyValueStore::open(dir.path(), "s", &memory).unwrap();
        for (k, v) in [("a", "1"), ("b", "2"), ("c", "3")] {
            store.put(k.as_bytes(), v.as_bytes()).unwrap();
        }
        store.commit(Some(1)).unwrap();

        let release = hold_writer(&memory);
        store.put(b"a", b"10").unwrap();
        store.delete(b"b").unwrap();
        store.put(b"d", b"4").unwrap();
        store.commit(Some(2)).unwrap();
        assert!(store.backend().in_flight());
        // RocksDB still holds the first commit only ...
        assert_eq!(store.backend().get(0, b"a").unwrap(), Some(b"1".to_vec()));
        assert_eq!(store.backend().get(0, b"d").unwrap(), None);
        // ... and the store reads the second one from its pending writes.
        assert_eq!(store.committed_offset(), Some(2));
        assert_eq!(store.get(b"a").unwrap(), Some(b"10".to_vec()));
        assert_eq!(store.get(b"b").unwrap(), None);
        assert_eq!(all(&store), pairs(&[("a", "10"), ("c", "3"), ("d", "4")]));
        // Open writes go over the pending ones; an abort drops only them.
        store.put(b"c", b"30").unwrap();
        store.put(b"b", b"20").unwrap();
        assert_eq!(
            all(&store),
            pairs(&[("a", "10"), ("b", "20"), ("c", "30"), ("d", "4")])
        );
        store.abort();
        assert_eq!(all(&store), pairs(&[("a", "10"), ("c", "3"), ("d", "4")]));
        store.put(b"c", b"30").unwrap();

        drop(release);
        // The next commit waits for the one in flight first.
        store.commit(Some(3)).unwrap();
        drop(store);
        let store = RocksDbKeyValueStore::open(dir.path(), "s", &memory).unwrap();
        assert_eq!(store.committed_offset(), Some(3));
        assert_eq!(all(&store), pairs(&[("a", "10"), ("c", "30"), ("d", "4")]));
    }

    #[test]
    fn dropping_a_store_waits_for_its_write_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let memory = RocksDbMemory::new(&StateConfig::default());
        let mut store = RocksDbKeyValueStore::open(dir.path(), "s", &memory).unwrap();
        let release = hold_writer(&memory);
        store.put(b"k", b"v").unwrap();
        store.commit(Some(7)).unwrap();
        assert!(store.backend().in_flight());
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            drop(release);
        });
        drop(store);
        // Reopening needs RocksDB's lock: the write has landed and the
        // database is closed.
        let store = RocksDbKeyValueStore::open(dir.path(), "s", &memory).unwrap();
        assert_eq!(store.committed_offset(), Some(7));
        assert_eq!(store.get(b"k").unwrap(), Some(b"v".to_vec()));
        releaser.join().unwrap();
    }

    #[test]
    fn without_background_writes_a_commit_lands_before_it_returns() {
        let dir = tempfile::tempdir().unwrap();
        let config = StateConfig {
            background_commit_writes: false,
            ..StateConfig::default()
        };
        let memory = RocksDbMemory::new(&config);
        let mut store = RocksDbKeyValueStore::open(dir.path(), "s", &memory).unwrap();
        let _held = hold_writer(&memory);
        store.put(b"k", b"v").unwrap();
        store.commit(Some(1)).unwrap();
        assert!(!store.backend().in_flight());
        assert_eq!(store.backend().get(0, b"k").unwrap(), Some(b"v".to_vec()));
    }

    /// Copies the files of a store whose process died (no close, no flush)
    /// as a restarted process finds them.
    fn as_after_a_kill(store: RocksDbKeyValueStore, dir: &Path) -> tempfile::TempDir {
        let copy = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name() != "LOCK" {
                std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
            }
        }
        // Never closed, as in a kill (its LOCK stays with this process).
        std::mem::forget(store);
        copy
    }

    fn sst_files(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "sst")
            })
            .count()
    }

    #[test]
    fn a_store_reopened_after_a_kill_replays_its_log_without_writing_a_table_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = StateConfig {
            background_commit_writes: false,
            ..StateConfig::default()
        };
        let memory = RocksDbMemory::new(&config);
        let mut store = RocksDbKeyValueStore::open(dir.path(), "s", &memory).unwrap();
        for i in 0..1_000u32 {
            store
                .put(format!("k{i:04}").as_bytes(), &i.to_be_bytes())
                .unwrap();
        }
        store.commit(Some(7)).unwrap();
        assert_eq!(
            sst_files(dir.path()),
            0,
            "the commit is in the memtable and the log"
        );
        let killed = as_after_a_kill(store, dir.path());

        let store = RocksDbKeyValueStore::open(killed.path(), "s", &memory).unwrap();
        assert_eq!(store.committed_offset(), Some(7));
        assert_eq!(
            store.get(b"k0999").unwrap(),
            Some(999u32.to_be_bytes().to_vec())
        );
        assert_eq!(store.all().unwrap().count(), 1_000);
        // The replayed commits stay in memtables: the open wrote no table.
        assert_eq!(sst_files(killed.path()), 0);
    }
}
