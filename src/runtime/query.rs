//! Interactive queries of key-value stores: reading a named store across
//! this instance's active tasks while the application runs.
//!
//! A store's tasks belong to the stream threads, which own them without
//! locks; so a query is not read from another thread. It is posted to
//! every stream thread's inbox ([`QueryBus`]) and each thread answers for
//! its own tasks between two rounds of its loop, then the answers are
//! merged. A thread that is idle (waiting for input in `poll`, where it
//! does not hold its lock) is read directly instead, under its lock, when
//! its stores hold only committed state ([`DirectReads`]).
//!
//! **Isolation.** Under exactly-once a thread answers only when nothing
//! was processed since its last commit (right after a commit, or while
//! idle), so a query sees committed state: what the output topics show to
//! a `read_committed` reader, never a count an aborted transaction would
//! take back. Under at-least-once it answers at once and may see updates
//! of the open commit interval (as Kafka Streams' interactive queries do).
//!
//! **Which task.** A key belongs to one partition of the store's
//! sub-topology: `murmur2(serialized key) mod partitions`, as the default
//! partitioner puts it (Kafka's and librdkafka's `murmur2_random`), so a
//! `get` asks only that task. When no task of this instance holds it, the
//! answer says so ([`QueryError::NotLocal`]); while it restores,
//! [`QueryError::Unavailable`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::query_read::{KvEntries, StoreRead, WindowEntry, read_task};
use super::{AppState, InstanceInfo, Router, StateCell};
use crate::processor::{TaskId, TaskInstance};
use crate::serdes::SharedSerde;
use crate::state::StoreKind;
use crate::topology::Topology;

/// How long a query waits for the stream threads' answers.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a query could not be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// The topology has no store of that name.
    #[error("no store named {store:?}; the topology's stores are {known:?}")]
    UnknownStore {
        /// The name asked for.
        store: String,
        /// The topology's queryable stores.
        known: Vec<String>,
    },
    /// The store is not a key-value store.
    #[error("store {store:?} is a {kind} store, not a {asked} store")]
    WrongKind {
        /// The store.
        store: String,
        /// Its kind.
        kind: String,
        /// The kind asked for.
        asked: String,
    },
    /// The store holds other types than the ones asked for.
    #[error("store {store:?} holds {key_type} → {value_type}")]
    WrongTypes {
        /// The store.
        store: String,
        /// Its key type.
        key_type: &'static str,
        /// Its value type.
        value_type: &'static str,
    },
    /// A key or value could not be (de)serialized.
    #[error("store {store:?}: {message}")]
    Serde {
        /// The store.
        store: String,
        /// What failed.
        message: String,
    },
    /// The key's task is not active on this instance.
    #[error("the key of store {store:?} belongs to task {task}, which this instance does not run")]
    NotLocal {
        /// The store.
        store: String,
        /// The task that holds the key.
        task: TaskId,
    },
    /// The application is not running, or the key's task is restoring or
    /// moving: retry later.
    #[error("store {store:?} is not available now ({reason}); retry")]
    Unavailable {
        /// The store.
        store: String,
        /// Why.
        reason: String,
    },
    /// A store read failed.
    #[error("store {store:?}: reading failed: {message}")]
    Store {
        /// The store.
        store: String,
        /// The store error.
        message: String,
    },
}

/// One thread's answer to a query.
#[derive(Debug, Default)]
pub(crate) struct ThreadAnswer {
    /// Entries found, per task that has the store.
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// Windows or sessions found.
    windows: Vec<WindowEntry>,
    count: u64,
    /// Tasks of this thread that have the store, answering.
    running: BTreeSet<TaskId>,
    /// Tasks of this thread that have the store and still restore.
    restoring: BTreeSet<TaskId>,
    /// A read that failed.
    error: Option<String>,
}

/// A query waiting in a thread's inbox.
pub(crate) struct Pending {
    store: Arc<str>,
    read: Arc<StoreRead>,
    /// Only this task answers (a `get`); `None`: every task of the store.
    task: Option<TaskId>,
    reply: mpsc::Sender<ThreadAnswer>,
}

/// A stream thread a query can be answered on directly, when the thread
/// is between rounds (see the module docs).
pub(crate) trait DirectReads: Send + Sync {
    /// Answers `pending` now if the thread is idle and its stores hold
    /// only committed state; gives it back otherwise.
    fn try_answer(&self, pending: Pending) -> Option<Pending>;
}

/// Where queries wait for the stream threads; see the module docs.
pub(crate) struct QueryBus {
    inboxes: Vec<Mutex<Vec<Pending>>>,
    /// Per thread, once it runs: its direct path.
    direct: Vec<Mutex<Option<Arc<dyn DirectReads>>>>,
    /// Partitions per sub-topology, known once the application started.
    partitions: Mutex<Option<Vec<i32>>>,
}

impl QueryBus {
    /// A bus for `threads` stream threads.
    pub(crate) fn new(threads: usize) -> Self {
        QueryBus {
            inboxes: (0..threads).map(|_| Mutex::new(Vec::new())).collect(),
            direct: (0..threads).map(|_| Mutex::new(None)).collect(),
            partitions: Mutex::new(None),
        }
    }

    /// Records the partition count of each sub-topology (at start).
    pub(crate) fn set_partitions(&self, tasks_per_subtopology: Vec<i32>) {
        *self.partitions.lock().expect("query bus lock") = Some(tasks_per_subtopology);
    }

    /// Registers thread `index`'s direct path (`None` when it stops).
    pub(crate) fn set_direct(&self, index: usize, direct: Option<Arc<dyn DirectReads>>) {
        if let Some(slot) = self.direct.get(index) {
            *slot.lock().expect("query bus lock") = direct;
        }
    }

    /// The queries waiting for thread `index`.
    pub(crate) fn take(&self, index: usize) -> Vec<Pending> {
        match self.inboxes.get(index) {
            Some(inbox) => std::mem::take(&mut *inbox.lock().expect("query bus lock")),
            None => Vec::new(),
        }
    }

    /// The partition count of `subtopology`, once started.
    pub(crate) fn partitions(&self, subtopology: u32) -> Option<i32> {
        let partitions = self.partitions.lock().expect("query bus lock");
        partitions.as_ref()?.get(subtopology as usize).copied()
    }

    /// The task of `subtopology` that holds the serialized key `key`;
    /// `None` before the application started.
    pub(crate) fn task_of(&self, subtopology: u32, key: &[u8]) -> Option<TaskId> {
        let partitions = self.partitions.lock().expect("query bus lock");
        let count = *partitions.as_ref()?.get(subtopology as usize)?;
        Some(TaskId {
            subtopology,
            partition: partition_of(key, count),
        })
    }

    /// Posts `read` of `store` to every thread and merges their answers.
    pub(crate) fn ask(
        &self,
        store: &str,
        read: StoreRead,
        task: Option<TaskId>,
    ) -> Result<Merged, QueryError> {
        let (reply, answers) = mpsc::channel();
        let store_name: Arc<str> = Arc::from(store);
        let read = Arc::new(read);
        for (inbox, direct) in self.inboxes.iter().zip(&self.direct) {
            let mut pending = Some(Pending {
                store: store_name.clone(),
                read: read.clone(),
                task,
                reply: reply.clone(),
            });
            let direct = direct.lock().expect("query bus lock").clone();
            if let Some(direct) = direct {
                pending = direct.try_answer(pending.take().expect("set above"));
            }
            if let Some(pending) = pending {
                inbox.lock().expect("query bus lock").push(pending);
            }
        }
        drop(reply);
        let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
        let mut merged = Merged::default();
        for _ in 0..self.inboxes.len() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let answer = answers
                .recv_timeout(left)
                .map_err(|_| QueryError::Unavailable {
                    store: store.to_string(),
                    reason: format!("the stream threads did not answer within {ANSWER_TIMEOUT:?}"),
                })?;
            if let Some(message) = answer.error {
                return Err(QueryError::Store {
                    store: store.to_string(),
                    message,
                });
            }
            merged.entries.extend(answer.entries);
            merged.windows.extend(answer.windows);
            merged.count += answer.count;
            merged.running.extend(answer.running);
            merged.restoring.extend(answer.restoring);
        }
        merged.entries.sort_by(|a, b| a.0.cmp(&b.0));
        merged.entries.dedup_by(|a, b| a.0 == b.0);
        merged
            .windows
            .sort_by(|a, b| (&a.0, a.1, a.2).cmp(&(&b.0, b.1, b.2)));
        merged
            .windows
            .dedup_by(|a, b| (&a.0, a.1, a.2) == (&b.0, b.1, b.2));
        Ok(merged)
    }
}

/// The answers of all threads, merged.
#[derive(Debug, Default)]
pub(crate) struct Merged {
    /// Entries in serialized key order, each key once.
    pub(crate) entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// Windows or sessions in (key, start, end) order.
    pub(crate) windows: Vec<WindowEntry>,
    pub(crate) count: u64,
    /// Tasks of the store that answered.
    pub(crate) running: BTreeSet<TaskId>,
    /// Tasks of the store that restore.
    pub(crate) restoring: BTreeSet<TaskId>,
}

/// Answers `pending` from the tasks of one thread: `running` answer,
/// `restoring` are only named.
pub(crate) fn answer<'a>(
    pending: Pending,
    running: impl Iterator<Item = &'a TaskInstance>,
    restoring: impl Iterator<Item = &'a TaskInstance>,
) {
    let mut answer = ThreadAnswer::default();
    let store = &*pending.store;
    let wanted = |task: &TaskInstance| pending.task.is_none_or(|id| id == task.id());
    for task in running.filter(|t| wanted(t)) {
        let Some(read) = read_task(task, store, &pending.read) else {
            continue;
        };
        answer.running.insert(task.id());
        match read {
            Ok(found) => {
                answer.entries.extend(found.entries);
                answer.windows.extend(found.windows);
                answer.count += found.count;
            }
            Err(e) => answer.error = Some(e.to_string()),
        }
    }
    for task in restoring.filter(|t| wanted(t)) {
        if task.store_serdes(store).is_some() {
            answer.restoring.insert(task.id());
        }
    }
    // The asker may have given up (timeout): nothing to do then.
    let _ = pending.reply.send(answer);
}

/// Kafka's `murmur2` hash (as the Java client and librdkafka's
/// `murmur2_random` partitioner compute it).
pub(crate) fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The partition of `partitions` the default partitioner gives a record
/// with serialized key `key`.
pub(crate) fn partition_of(key: &[u8], partitions: i32) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) % partitions.max(1) as u32) as i32
}

/// The queryable stores of `topology`: name → (kind, sub-topology).
fn stores_of(topology: &Topology) -> BTreeMap<String, (StoreKind, u32)> {
    let mut stores = BTreeMap::new();
    for (index, sub) in topology.subtopologies.iter().enumerate() {
        for &s in &sub.stores {
            let def = &topology.stores[s];
            stores.insert(def.name.clone(), (def.kind, index as u32));
        }
    }
    stores
}

/// Where a key lives ([`KeyValueQuery::metadata`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyMetadata {
    /// The task that holds the key.
    pub task: TaskId,
    /// The instance that runs the task now; `None` while it moves.
    pub active: Option<InstanceInfo>,
    /// The instances that keep standby copies of the task.
    pub standbys: Vec<InstanceInfo>,
}

/// What the typed queries share: the store, its sub-topology and serdes.
struct TypedStore<K, V> {
    bus: Arc<QueryBus>,
    router: Arc<Router>,
    state: Arc<StateCell>,
    standbys: Arc<super::standby::StandbyRegistry>,
    store: String,
    /// The store's changelog topic, when logged.
    changelog: Option<String>,
    subtopology: u32,
    key_serde: SharedSerde<K>,
    value_serde: SharedSerde<V>,
}

/// How the runtime hands a query type what it needs.
pub(crate) struct QueryParts<'a> {
    pub(crate) bus: Arc<QueryBus>,
    pub(crate) router: Arc<Router>,
    pub(crate) state: Arc<StateCell>,
    pub(crate) standbys: Arc<super::standby::StandbyRegistry>,
    pub(crate) topology: &'a Topology,
    pub(crate) application_id: &'a str,
}

impl<K: 'static, V: 'static> TypedStore<K, V> {
    fn open(parts: QueryParts<'_>, store: &str, expected: StoreKind) -> Result<Self, QueryError> {
        let topology = parts.topology;
        let stores = stores_of(topology);
        let Some(&(kind, subtopology)) = stores.get(store) else {
            return Err(QueryError::UnknownStore {
                store: store.to_string(),
                known: stores.keys().cloned().collect(),
            });
        };
        if kind != expected {
            return Err(QueryError::WrongKind {
                store: store.to_string(),
                kind: kind.label().to_string(),
                asked: expected.label().to_string(),
            });
        }
        let def = topology
            .stores
            .iter()
            .find(|d| d.name == store)
            .expect("listed above");
        let (Some(key_serde), Some(value_serde)) = (
            def.serdes.key.downcast_ref::<SharedSerde<K>>(),
            def.serdes.value.downcast_ref::<SharedSerde<V>>(),
        ) else {
            return Err(QueryError::WrongTypes {
                store: store.to_string(),
                key_type: def.serdes.key_type,
                value_type: def.serdes.value_type,
            });
        };
        Ok(TypedStore {
            bus: parts.bus,
            router: parts.router,
            state: parts.state,
            standbys: parts.standbys,
            store: store.to_string(),
            changelog: def
                .logging
                .then(|| def.changelog_topic(parts.application_id)),
            subtopology,
            key_serde: key_serde.clone(),
            value_serde: value_serde.clone(),
        })
    }

    fn serde_error(&self, e: impl std::fmt::Display) -> QueryError {
        QueryError::Serde {
            store: self.store.clone(),
            message: e.to_string(),
        }
    }

    fn unavailable(&self, reason: impl Into<String>) -> QueryError {
        QueryError::Unavailable {
            store: self.store.clone(),
            reason: reason.into(),
        }
    }

    fn key_bytes(&self, key: &K) -> Result<Vec<u8>, QueryError> {
        let mut out = Vec::new();
        self.key_serde
            .serialize(&self.store, key, &mut out)
            .map_err(|e| self.serde_error(e))?;
        Ok(out)
    }

    fn key(&self, bytes: &[u8]) -> Result<K, QueryError> {
        self.key_serde
            .deserialize(&self.store, bytes)
            .map_err(|e| self.serde_error(e))
    }

    fn value(&self, bytes: &[u8]) -> Result<V, QueryError> {
        self.value_serde
            .deserialize(&self.store, bytes)
            .map_err(|e| self.serde_error(e))
    }

    fn task_of(&self, key: &K) -> Result<TaskId, QueryError> {
        self.bus
            .task_of(self.subtopology, &self.key_bytes(key)?)
            .ok_or_else(|| self.unavailable("the application has not started"))
    }

    fn metadata(&self, key: &K) -> Result<KeyMetadata, QueryError> {
        let task = self.task_of(key)?;
        let instances = self
            .router
            .instances()
            .map_err(|reason| self.unavailable(format!("describing the group: {reason}")))?;
        Ok(KeyMetadata {
            task,
            active: instances.iter().find(|i| i.tasks.contains(&task)).cloned(),
            standbys: instances
                .iter()
                .filter(|i| i.standby_tasks.contains(&task))
                .cloned()
                .collect(),
        })
    }

    /// Asks only `task` (the key's): [`QueryError::NotLocal`] when it runs
    /// elsewhere, [`QueryError::Unavailable`] while it restores here or the
    /// application is not `Running` (a rebalance may be moving it).
    fn ask_task(&self, task: TaskId, read: StoreRead) -> Result<Merged, QueryError> {
        let merged = self.bus.ask(&self.store, read, Some(task))?;
        if merged.restoring.contains(&task) {
            return Err(self.unavailable(format!("task {task} is restoring")));
        }
        if !merged.running.contains(&task) {
            let state = self.state.get();
            if state != AppState::Running {
                return Err(self.unavailable(format!("the application is {state:?}")));
            }
            return Err(QueryError::NotLocal {
                store: self.store.clone(),
                task,
            });
        }
        Ok(merged)
    }
}

/// A value that may come from a standby copy ([`KeyValueQuery::get_stale`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale<T> {
    /// What was read.
    pub value: T,
    /// Read from this instance's standby copy, not the active task.
    pub standby: bool,
    /// For a standby read: how many changelog offsets the copy is behind
    /// the changelog's end (a transaction marker counts as one); `None`
    /// when read from the active task or the end is unknown.
    pub lag_records: Option<i64>,
}

/// Read-only, typed access to key-value store `store` across this
/// instance's active tasks; from [`crate::runtime::KafkaStreams::key_value_store`].
pub struct KeyValueQuery<K, V>(TypedStore<K, V>);

impl<K: 'static, V: 'static> KeyValueQuery<K, V> {
    pub(crate) fn new(parts: QueryParts<'_>, store: &str) -> Result<Self, QueryError> {
        TypedStore::open(parts, store, StoreKind::KeyValue).map(KeyValueQuery)
    }

    fn typed(&self, entries: KvEntries) -> Result<Vec<(K, V)>, QueryError> {
        entries
            .into_iter()
            .map(|(k, v)| Ok((self.0.key(&k)?, self.0.value(&v)?)))
            .collect()
    }

    /// The task that holds `key` (`None` before the application started).
    pub fn task_of(&self, key: &K) -> Result<Option<TaskId>, QueryError> {
        Ok(self
            .0
            .bus
            .task_of(self.0.subtopology, &self.0.key_bytes(key)?))
    }

    /// Where `key` lives: its task, the instance that runs it and those
    /// that keep standby copies of it (from the group description).
    pub fn metadata(&self, key: &K) -> Result<KeyMetadata, QueryError> {
        self.0.metadata(key)
    }

    /// The committed value of `key`. [`QueryError::NotLocal`] when its task
    /// runs elsewhere, [`QueryError::Unavailable`] while it restores here or
    /// the application is not `Running` (a rebalance may be moving it).
    pub fn get(&self, key: &K) -> Result<Option<V>, QueryError> {
        let task = self.0.task_of(key)?;
        let merged = self
            .0
            .ask_task(task, StoreRead::Get(self.0.key_bytes(key)?))?;
        Ok(self.typed(merged.entries)?.pop().map(|(_, v)| v))
    }

    /// As [`KeyValueQuery::get`], but when the key's task cannot answer
    /// here (it runs elsewhere, restores, or moves) and this instance keeps
    /// a standby copy of it, the value comes from that copy: an older
    /// committed value, with [`Stale::lag_records`] saying how far behind.
    pub fn get_stale(&self, key: &K) -> Result<Stale<Option<V>>, QueryError> {
        let error = match self.get(key) {
            Ok(value) => {
                return Ok(Stale {
                    value,
                    standby: false,
                    lag_records: None,
                });
            }
            Err(e @ (QueryError::NotLocal { .. } | QueryError::Unavailable { .. })) => e,
            Err(e) => return Err(e),
        };
        let task = self.0.task_of(key)?;
        let read = StoreRead::Get(self.0.key_bytes(key)?);
        let Some((found, applied)) = self.0.standbys.read(task, &self.0.store, &read) else {
            return Err(error);
        };
        let found = found.map_err(|e| QueryError::Store {
            store: self.0.store.clone(),
            message: e.to_string(),
        })?;
        let lag_records = self
            .0
            .changelog
            .as_deref()
            .and_then(|topic| self.0.router.standby_lag(topic, task.partition, applied));
        Ok(Stale {
            value: self.typed(found.entries)?.pop().map(|(_, v)| v),
            standby: true,
            lag_records,
        })
    }

    fn scan(&self, read: StoreRead) -> Result<Vec<(K, V)>, QueryError> {
        let merged = self.0.bus.ask(&self.0.store, read, None)?;
        self.typed(merged.entries)
    }

    /// Entries with serialized keys between those of `from` and `to`
    /// (inclusive; `None`: unbounded), in serialized key order, from every
    /// task of the store this instance runs (tasks still restoring are
    /// left out; [`KeyValueQuery::tasks`] names them).
    pub fn range(&self, from: Option<&K>, to: Option<&K>) -> Result<Vec<(K, V)>, QueryError> {
        let from = from.map(|k| self.0.key_bytes(k)).transpose()?;
        let to = to.map(|k| self.0.key_bytes(k)).transpose()?;
        self.scan(StoreRead::Range { from, to })
    }

    /// Entries whose serialized key starts with `prefix`'s.
    pub fn prefix(&self, prefix: &K) -> Result<Vec<(K, V)>, QueryError> {
        self.scan(StoreRead::Prefix(self.0.key_bytes(prefix)?))
    }

    /// Every entry of the store's local tasks.
    pub fn all(&self) -> Result<Vec<(K, V)>, QueryError> {
        self.range(None, None)
    }

    /// An estimate of the entries in the store's local tasks.
    pub fn approximate_num_entries(&self) -> Result<u64, QueryError> {
        Ok(self.0.bus.ask(&self.0.store, StoreRead::Count, None)?.count)
    }

    /// The store's tasks on this instance: answering, and restoring.
    pub fn tasks(&self) -> Result<(Vec<TaskId>, Vec<TaskId>), QueryError> {
        let merged = self.0.bus.ask(&self.0.store, StoreRead::Count, None)?;
        Ok((
            merged.running.into_iter().collect(),
            merged.restoring.into_iter().collect(),
        ))
    }
}

/// Read-only, typed access to window store `store` across this instance's
/// active tasks; from [`crate::runtime::KafkaStreams::window_store`].
/// Windows are named by their start (ms).
pub struct WindowQuery<K, V>(TypedStore<K, V>);

impl<K: 'static, V: 'static> WindowQuery<K, V> {
    pub(crate) fn new(parts: QueryParts<'_>, store: &str) -> Result<Self, QueryError> {
        TypedStore::open(parts, store, StoreKind::Window).map(WindowQuery)
    }

    /// Where `key` lives (see [`KeyValueQuery::metadata`]).
    pub fn metadata(&self, key: &K) -> Result<KeyMetadata, QueryError> {
        self.0.metadata(key)
    }

    /// The committed windows of `key` that start in `from_ms..=to_ms`:
    /// `(start, value)` in start order. Errors as [`KeyValueQuery::get`].
    pub fn fetch(&self, key: &K, from_ms: i64, to_ms: i64) -> Result<Vec<(i64, V)>, QueryError> {
        let task = self.0.task_of(key)?;
        let read = StoreRead::WindowFetch {
            key: self.0.key_bytes(key)?,
            from: from_ms,
            to: to_ms,
        };
        self.0
            .ask_task(task, read)?
            .windows
            .into_iter()
            .map(|(_, start, _, v)| Ok((start, self.0.value(&v)?)))
            .collect()
    }

    /// The committed windows of every key of this instance's tasks that
    /// start in `from_ms..=to_ms`: `(key, start, value)`.
    pub fn fetch_all(&self, from_ms: i64, to_ms: i64) -> Result<Vec<(K, i64, V)>, QueryError> {
        let read = StoreRead::WindowAll {
            from: from_ms,
            to: to_ms,
        };
        self.0
            .bus
            .ask(&self.0.store, read, None)?
            .windows
            .into_iter()
            .map(|(k, start, _, v)| Ok((self.0.key(&k)?, start, self.0.value(&v)?)))
            .collect()
    }
}

/// Read-only, typed access to session store `store` across this
/// instance's active tasks; from [`crate::runtime::KafkaStreams::session_store`].
pub struct SessionQuery<K, V>(TypedStore<K, V>);

impl<K: 'static, V: 'static> SessionQuery<K, V> {
    pub(crate) fn new(parts: QueryParts<'_>, store: &str) -> Result<Self, QueryError> {
        TypedStore::open(parts, store, StoreKind::Session).map(SessionQuery)
    }

    /// Where `key` lives (see [`KeyValueQuery::metadata`]).
    pub fn metadata(&self, key: &K) -> Result<KeyMetadata, QueryError> {
        self.0.metadata(key)
    }

    /// The committed sessions of `key`: `(start, end, value)` in start
    /// order. Errors as [`KeyValueQuery::get`].
    pub fn fetch(&self, key: &K) -> Result<Vec<(i64, i64, V)>, QueryError> {
        let task = self.0.task_of(key)?;
        let read = StoreRead::SessionFetch(self.0.key_bytes(key)?);
        self.0
            .ask_task(task, read)?
            .windows
            .into_iter()
            .map(|(_, start, end, v)| Ok((start, end.unwrap_or(start), self.0.value(&v)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafka() {
        // Kafka's UtilsTest.testMurmur2.
        let cases: [(&[u8], i32); 5] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
        ];
        for (data, expected) in cases {
            assert_eq!(murmur2(data) as i32, expected, "{data:?}");
        }
    }

    #[test]
    fn partitions_are_the_positive_hash_modulo_the_count() {
        for key in [&b"a"[..], b"the", b"", b"\xff\xfe"] {
            let p = partition_of(key, 4);
            assert!((0..4).contains(&p));
            assert_eq!(p, ((murmur2(key) & 0x7fff_ffff) % 4) as i32);
        }
    }
}
