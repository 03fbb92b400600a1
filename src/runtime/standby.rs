//! Standby replicas: warm copies of other instances' task state, kept by
//! reading their changelogs, so a task that moves here after a failure
//! restores only the last few records instead of its whole changelog
//! (Kafka Streams' `num.standby.replicas`).
//!
//! # Placement
//!
//! librdkafka cannot plug in Kafka Streams' assignor, so placement is
//! computed outside the group protocol from what every member can read: the
//! group's members and their assignments (librdkafka's
//! `DescribeConsumerGroups`, which works under both group protocols;
//! `group_describe.rs`). Members are
//! grouped into instances by the process id in their `client.id`; the
//! instances are sorted by process id; the standbys of a task are the
//! `num_standby_replicas` instances that follow its active owner in that
//! cyclic order. Every instance computes the same placement and keeps the
//! tasks it is named for. Only tasks with logged stores have standbys. A
//! standby whose task the group has just assigned to this instance stays
//! open although no longer named, until a stream thread claims it: the
//! standby thread may read the new assignment before the stream thread's
//! rebalance callback runs, and closing the copy then would lose the
//! takeover.
//!
//! # Invariants
//!
//! * A task is open at most once per instance: as an active task of one
//!   stream thread or as a standby, never both. [`StandbyRegistry`] holds
//!   the active tasks (with their thread) and the standbys under one lock; a
//!   stream thread [`claim`](StandbyRegistry::claim)s a task before opening
//!   it and takes over a standby copy if one exists (committed up to the
//!   last applied changelog record, so its restore reads only the tail).
//!   A claim of a task another stream thread still has open is refused
//!   ([`StreamsError::TaskStillOpen`]): the group gave it away when that
//!   thread's membership was dropped (stuck past `max.poll.interval.ms`,
//!   say), and that thread closes it at its next poll; the claiming thread
//!   retries after a backoff (Kafka Streams retries a task whose directory
//!   lock it cannot take). Only the owner's release frees a claim.
//! * A standby reads its changelogs with the changelog reader a restore
//!   uses (`changelog/`, following instead of stopping at the end): from
//!   each store's committed offset + 1, or the log's start when the records
//!   in between were deleted; records read with `read_committed`, so those
//!   of aborted transactions never enter it; applied through
//!   `restore_batch` with the offset of the last one, committed every
//!   10,000 records and every 5 s.
//! * A standby copy ahead of its changelog (its store reflects an offset at
//!   or past the log's end: the changelog was deleted or reset while the
//!   state directory stayed) is wiped and read from the log's start, with a
//!   warning. Its state is only a copy of the changelog, so nothing is lost;
//!   an active task in that situation fails instead (`restore.rs`).
//! * Placement is re-read every 3 s; when the set of standby tasks changed,
//!   the reader is rebuilt for the new set, under the registry lock (so no
//!   stream thread claims a task meanwhile). A failure to reach the broker
//!   then is logged and retried at the next placement.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;

use super::StreamsError;
use super::changelog::{
    ChangelogPartition, ChangelogReader, ChangelogSource, KafkaChangelog, Plan, ReadMode,
    RestoreTarget,
};
use super::end_of_partition::RestoreConsumer;
use super::group_describe::{GroupInstance, describe_group, instances};
use super::stores::InstanceState;
use super::topics::TopicLayout;
use crate::config::StreamsConfig;
use crate::metrics::Metrics;
use crate::processor::{TaskConfig, TaskId, TaskInstance};
use crate::state::ChangelogRecord;
use crate::topology::Topology;

/// How often the group's membership is read again.
const PLACEMENT_INTERVAL: Duration = Duration::from_secs(3);
/// How often standby stores commit what they applied.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5);
/// How long one read of the standby changelogs waits for records.
const POLL_WAIT: Duration = Duration::from_millis(200);
/// How long reading a changelog's watermarks may take.
const WATERMARKS_TIMEOUT: Duration = Duration::from_secs(5);

/// A standby task: an uninitialized task whose stores follow the changelog.
pub(crate) struct StandbyTask {
    task: TaskInstance,
}

impl StandbyTask {
    /// Makes what was applied durable. Every applied batch already carries
    /// its changelog offset (`restore_batch`), so no offset is given here.
    fn checkpoint(&mut self) -> Result<(), StreamsError> {
        Ok(self.task.commit(|_| None)?)
    }

    /// Commits and hands the task over (still `Created`, stores open).
    pub(crate) fn into_task(mut self) -> Result<TaskInstance, StreamsError> {
        self.checkpoint()?;
        Ok(self.task)
    }

    fn close(mut self) {
        let id = self.task.id();
        if let Err(e) = self.checkpoint().and_then(|()| Ok(self.task.close()?)) {
            tracing::warn!(task = %id, error = %e, "closing a standby task failed");
        }
    }
}

#[derive(Default)]
struct Registry {
    /// The active tasks and the stream thread that has each open.
    active: BTreeMap<TaskId, usize>,
    standby: BTreeMap<TaskId, StandbyTask>,
    /// Set by the standby thread when it starts (no standbys before that).
    metrics: Option<Arc<Metrics>>,
}

impl Registry {
    fn publish_count(&self) {
        if let Some(m) = &self.metrics {
            m.standby_tasks.set(self.standby.len() as i64);
        }
    }
}

/// Which tasks this instance runs as active and which as standby. See the
/// module docs.
#[derive(Default)]
pub(crate) struct StandbyRegistry {
    inner: Mutex<Registry>,
}

impl StandbyRegistry {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks `id` active on stream thread `thread`; returns its standby
    /// copy, if this instance kept one, for the thread to take over. Fails
    /// while another stream thread still has `id` open.
    pub(crate) fn claim(
        &self,
        id: TaskId,
        thread: usize,
    ) -> Result<Option<StandbyTask>, StreamsError> {
        let mut registry = self.lock();
        match registry.active.get(&id) {
            Some(&owner) if owner != thread => {
                return Err(StreamsError::TaskStillOpen {
                    task: id,
                    thread: owner,
                });
            }
            _ => registry.active.insert(id, thread),
        };
        let Some(standby) = registry.standby.remove(&id) else {
            return Ok(None);
        };
        registry.publish_count();
        if let Some(m) = &registry.metrics {
            m.standby_takeovers.inc();
        }
        Ok(Some(standby))
    }

    /// Runs `read` on store `store` of this instance's standby copy of
    /// `id`, if it keeps one: what it found and the changelog offset the
    /// copy applied last. The standby thread waits meanwhile.
    pub(crate) fn read(
        &self,
        id: TaskId,
        store: &str,
        read: &super::query_read::StoreRead,
    ) -> Option<(
        Result<super::query_read::Found, crate::state::StoreError>,
        Option<i64>,
    )> {
        let registry = self.lock();
        let standby = registry.standby.get(&id)?;
        let found = super::query_read::read_task(&standby.task, store, read)?;
        Some((found, standby.task.store_committed_offset(store)))
    }

    /// Stream thread `thread` no longer has `id` open (closed, or failed to
    /// open). A task another thread claimed stays claimed.
    pub(crate) fn release(&self, id: TaskId, thread: usize) {
        let mut registry = self.lock();
        if registry.active.get(&id) == Some(&thread) {
            registry.active.remove(&id);
        }
    }

    fn close_all(&self) {
        let standbys = {
            let mut registry = self.lock();
            let standbys = std::mem::take(&mut registry.standby);
            registry.publish_count();
            standbys
        };
        for (_, standby) in standbys {
            standby.close();
        }
    }
}

/// The standby tasks of this instance, as what their changelogs are applied
/// to. A task missing here was claimed by a stream thread (or closed) after
/// its records were read: they are skipped, its new owner restores the tail.
impl RestoreTarget for BTreeMap<TaskId, StandbyTask> {
    fn restore_batch(
        &mut self,
        from: &ChangelogPartition,
        records: &[ChangelogRecord<'_>],
        last_offset: i64,
    ) -> Result<(), StreamsError> {
        if let Some(standby) = self.get_mut(&from.task) {
            standby
                .task
                .restore_batch(&from.store, records, last_offset)?;
        }
        Ok(())
    }

    fn commit(&mut self, from: &ChangelogPartition, last_offset: i64) -> Result<(), StreamsError> {
        match self.get_mut(&from.task) {
            Some(standby) => RestoreTarget::commit(&mut standby.task, from, last_offset),
            None => Ok(()),
        }
    }
}

/// Each instance's active tasks of `logged` sub-topologies: what standby
/// placement ([`standby_tasks`]) goes by.
pub(crate) fn logged_owners(
    instances: &BTreeMap<String, GroupInstance>,
    logged: &BTreeSet<u32>,
) -> BTreeMap<String, BTreeSet<TaskId>> {
    instances
        .iter()
        .map(|(process, instance)| {
            let tasks = instance
                .tasks
                .iter()
                .filter(|t| logged.contains(&t.subtopology))
                .copied()
                .collect();
            (process.clone(), tasks)
        })
        .collect()
}

/// The tasks `me` keeps as standbys, given each instance's active tasks.
pub(crate) fn standby_tasks(
    owners: &BTreeMap<String, BTreeSet<TaskId>>,
    me: &str,
    replicas: usize,
) -> BTreeSet<TaskId> {
    let instances: Vec<&String> = owners.keys().collect();
    let mut mine = BTreeSet::new();
    for (i, owner) in instances.iter().enumerate() {
        let followers = (1..instances.len())
            .map(|k| instances[(i + k) % instances.len()])
            .take(replicas);
        if followers.into_iter().any(|p| p == me) {
            mine.extend(owners[*owner].iter().copied());
        }
    }
    if let Some(active) = owners.get(me) {
        mine.retain(|t| !active.contains(t));
    }
    mine
}

/// What the standby thread needs of its instance.
pub(crate) struct StandbyEnv {
    pub(crate) config: StreamsConfig,
    pub(crate) topology: Arc<Topology>,
    pub(crate) layout: TopicLayout,
    pub(crate) task_config: TaskConfig,
    pub(crate) stores: Arc<InstanceState>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) shutdown: Arc<AtomicBool>,
    /// Local tasks opened ahead of the assignment (`warm.rs`).
    pub(crate) warm: Arc<super::warm::WarmTasks>,
}

/// Runs the standby thread of this instance until shutdown.
pub(crate) fn run(
    env: StandbyEnv,
    registry: Arc<StandbyRegistry>,
    process_id: String,
) -> Result<(), StreamsError> {
    let config = &env.config;
    let consumer: Arc<RestoreConsumer> = Arc::new(super::clients::restore_consumer(config)?);
    registry.lock().metrics = Some(env.metrics.clone());
    let mut reader = ChangelogReader::new(KafkaChangelog::new(consumer.clone()), ReadMode::Follow);
    let logged = env.topology.logged_subtopologies();
    let mut last_placement: Option<Instant> = None;
    let mut last_checkpoint = Instant::now();
    let mut assigned: BTreeSet<TaskId> = BTreeSet::new();
    while !env.shutdown.load(Ordering::SeqCst) {
        if last_placement.is_none_or(|t| t.elapsed() >= PLACEMENT_INTERVAL) {
            last_placement = Some(Instant::now());
            match desired_standbys(&env, &consumer, &process_id, &logged) {
                Ok(placement) => update_standbys(&env, &registry, &placement)?,
                Err(e) => tracing::debug!(error = %e, "reading the group for standby placement"),
            }
            let mut reg = registry.lock();
            let current: BTreeSet<TaskId> = reg.standby.keys().copied().collect();
            if current != assigned {
                match follow(&mut reader, &mut reg.standby, &mut |task: TaskInstance| {
                    wipe(&env, task)
                }) {
                    Ok(()) => assigned = current,
                    Err(e @ (StreamsError::Kafka { .. } | StreamsError::Timeout { .. })) => {
                        tracing::warn!(error = %e, "reading the standby changelogs; retrying at the next placement");
                        assigned.clear();
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        if assigned.is_empty() {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        if let Err(e) = reader.fetch(POLL_WAIT) {
            // librdkafka retries on its own; what was read before the error
            // is applied.
            tracing::debug!(error = %e, "reading the standby changelogs");
        }
        let mut reg = registry.lock();
        let applied = reader.apply(&mut reg.standby)?;
        env.metrics.standby_applied.inc_by(applied);
        if last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL {
            last_checkpoint = Instant::now();
            reader.commit(&mut reg.standby)?;
        }
    }
    reader.commit(&mut registry.lock().standby)?;
    registry.close_all();
    Ok(())
}

/// Reads the group and computes the standby tasks of this instance.
fn desired_standbys(
    env: &StandbyEnv,
    consumer: &RestoreConsumer,
    me: &str,
    logged: &BTreeSet<u32>,
) -> Result<Placement, String> {
    let app = &env.config.application_id;
    let members = describe_group(consumer.client(), app, Duration::from_secs(5))?;
    let instances = instances(members, app, &env.layout.subtopology_of_topic);
    let mut owners = logged_owners(&instances, logged);
    owners.entry(me.to_string()).or_default();
    tracing::debug!(?owners, "the group's active tasks, for standby placement");
    Ok(Placement {
        standbys: standby_tasks(&owners, me, env.config.num_standby_replicas),
        assigned_here: owners.remove(me).unwrap_or_default(),
    })
}

/// What the group's assignments mean for this instance.
struct Placement {
    /// The tasks this instance keeps as standbys.
    standbys: BTreeSet<TaskId>,
    /// The tasks the group assigned to this instance's stream threads.
    assigned_here: BTreeSet<TaskId>,
}

/// Opens standby tasks newly named for this instance and closes the others,
/// except those the group just assigned here: a stream thread is about to
/// claim them (a takeover), so they stay until it does, or until a later
/// placement names them neither standby nor assigned here.
fn update_standbys(
    env: &StandbyEnv,
    registry: &StandbyRegistry,
    placement: &Placement,
) -> Result<(), StreamsError> {
    let desired = &placement.standbys;
    let mut reg = registry.lock();
    let stale: Vec<TaskId> = reg
        .standby
        .keys()
        .filter(|id| !desired.contains(id) && !placement.assigned_here.contains(id))
        .copied()
        .collect();
    for id in stale {
        if let Some(standby) = reg.standby.remove(&id) {
            tracing::info!(task = %id, "closing standby task");
            standby.close();
        }
    }
    for &id in desired {
        if reg.active.contains_key(&id) || reg.standby.contains_key(&id) {
            continue;
        }
        let task = open_task(env, id)?;
        tracing::info!(task = %id, "opened standby task");
        reg.standby.insert(id, StandbyTask { task });
    }
    reg.publish_count();
    Ok(())
}

fn open_task(env: &StandbyEnv, id: TaskId) -> Result<TaskInstance, StreamsError> {
    if let Some(task) = env.warm.take(id) {
        return Ok(task);
    }
    Ok(env.stores.open_task(&env.topology, id, &env.task_config)?)
}

/// Closes `task`, deletes its local state and opens it again, empty.
fn wipe(env: &StandbyEnv, mut task: TaskInstance) -> Result<TaskInstance, StreamsError> {
    let id = task.id();
    task.close()?;
    env.stores.wipe_task(id)?;
    open_task(env, id)
}

/// Makes `reader` follow the changelogs of `standbys` (after committing what
/// it applied to the previous set): each store from its committed offset + 1
/// or the log's start. A standby whose stores are ahead of their changelog
/// is replaced by `wipe(task)` (empty stores) and read from the log's start;
/// see the module docs.
fn follow<S: ChangelogSource>(
    reader: &mut ChangelogReader<S>,
    standbys: &mut BTreeMap<TaskId, StandbyTask>,
    wipe: &mut dyn FnMut(TaskInstance) -> Result<TaskInstance, StreamsError>,
) -> Result<(), StreamsError> {
    reader.commit(standbys)?;
    reader.stop()?;
    let ids: Vec<TaskId> = standbys.keys().copied().collect();
    for id in ids {
        let Some(standby) = standbys.get(&id) else {
            continue;
        };
        let Some((store, committed, high)) = register(reader, &standby.task)? else {
            continue;
        };
        tracing::warn!(
            task = %id,
            store = %store,
            committed,
            changelog_end = high,
            "the standby copy is ahead of its changelog (the changelog was deleted or reset); wiping it and reading the changelog from its start"
        );
        reader.forget(id);
        if let Some(standby) = standbys.remove(&id) {
            let task = wipe(standby.task)?;
            register(reader, &task)?;
            standbys.insert(id, StandbyTask { task });
        }
    }
    reader.start()
}

/// Registers every changelog partition of `task` with `reader`; returns the
/// first store ahead of its changelog, with its committed offset and the
/// log's end, if any.
fn register<S: ChangelogSource>(
    reader: &mut ChangelogReader<S>,
    task: &TaskInstance,
) -> Result<Option<(String, i64, i64)>, StreamsError> {
    let id = task.id();
    for (store, topic) in task.changelog_topics() {
        let committed = task.store_committed_offset(store);
        let found = reader.register(
            id,
            store,
            (topic, id.partition),
            committed,
            WATERMARKS_TIMEOUT,
        )?;
        if let Plan::AheadOfLog { committed, high } = found.plan {
            return Ok(Some((store.to_string(), committed, high)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::changelog::tests::{TASK, count, count_record, word_count_task};
    use crate::runtime::changelog::{MemoryChangelog, restore_in_memory};

    fn standbys(task: TaskInstance) -> BTreeMap<TaskId, StandbyTask> {
        BTreeMap::from([(task.id(), StandbyTask { task })])
    }

    #[test]
    fn a_standby_follows_from_its_committed_offset() {
        let log = [
            count_record(0, "a", Some(1)),
            count_record(1, "a", Some(2)),
            count_record(2, "b", Some(1)),
            count_record(3, "a", Some(3)),
        ];
        let mut task = word_count_task();
        restore_in_memory(&mut task, |_: &str| &log[..2]).unwrap();
        let mut standbys = standbys(task);
        let mut reader =
            ChangelogReader::new(MemoryChangelog::new(|_: &str| &log[..]), ReadMode::Follow);
        let mut wipe =
            |_: TaskInstance| -> Result<TaskInstance, StreamsError> { panic!("nothing to wipe") };
        follow(&mut reader, &mut standbys, &mut wipe).unwrap();
        reader.fetch(Duration::ZERO).unwrap();
        assert_eq!(reader.apply(&mut standbys).unwrap(), 2, "offsets 2 and 3");
        let task = &standbys[&TASK].task;
        assert_eq!((count(task, "a"), count(task, "b")), (Some(3), Some(1)));
        assert_eq!(task.store_committed_offset("counts"), Some(3));
    }

    #[test]
    fn a_standby_ahead_of_its_changelog_is_wiped_and_read_from_the_start() {
        let old: Vec<_> = (0..8).map(|o| count_record(o, "old", Some(o))).collect();
        let mut task = word_count_task();
        restore_in_memory(&mut task, |_: &str| &old[..]).unwrap();
        assert_eq!(task.store_committed_offset("counts"), Some(7));
        // The changelog was deleted and written again: 3 records.
        let log = [
            count_record(0, "a", Some(1)),
            count_record(1, "b", Some(1)),
            count_record(2, "a", Some(2)),
        ];
        let mut standbys = standbys(task);
        let mut reader =
            ChangelogReader::new(MemoryChangelog::new(|_: &str| &log[..]), ReadMode::Follow);
        let mut wiped = 0;
        let mut wipe = |mut task: TaskInstance| -> Result<TaskInstance, StreamsError> {
            wiped += 1;
            task.close()?;
            Ok(word_count_task())
        };
        follow(&mut reader, &mut standbys, &mut wipe).unwrap();
        reader.fetch(Duration::ZERO).unwrap();
        assert_eq!(reader.apply(&mut standbys).unwrap(), 3);
        assert_eq!(wiped, 1);
        let task = &standbys[&TASK].task;
        assert_eq!(count(task, "old"), None, "the old copy is gone");
        assert_eq!((count(task, "a"), count(task, "b")), (Some(2), Some(1)));
        assert_eq!(task.store_committed_offset("counts"), Some(2));
    }

    #[test]
    fn records_of_a_claimed_standby_are_skipped() {
        let log = [count_record(0, "a", Some(1))];
        let mut standbys = standbys(word_count_task());
        let mut reader =
            ChangelogReader::new(MemoryChangelog::new(|_: &str| &log[..]), ReadMode::Follow);
        let mut wipe =
            |_: TaskInstance| -> Result<TaskInstance, StreamsError> { panic!("nothing to wipe") };
        follow(&mut reader, &mut standbys, &mut wipe).unwrap();
        let claimed = standbys.remove(&TASK).unwrap();
        reader.fetch(Duration::ZERO).unwrap();
        reader.apply(&mut standbys).unwrap();
        reader.commit(&mut standbys).unwrap();
        assert_eq!(claimed.task.store_committed_offset("counts"), None);
    }

    fn t(sub: u32, partition: i32) -> TaskId {
        TaskId {
            subtopology: sub,
            partition,
        }
    }

    #[test]
    fn standbys_follow_the_owner_in_process_order() {
        let owners: BTreeMap<String, BTreeSet<TaskId>> = [
            ("a".to_string(), BTreeSet::from([t(0, 0), t(0, 1)])),
            ("b".to_string(), BTreeSet::from([t(0, 2)])),
            ("c".to_string(), BTreeSet::from([t(0, 3)])),
        ]
        .into();
        assert_eq!(
            standby_tasks(&owners, "b", 1),
            BTreeSet::from([t(0, 0), t(0, 1)])
        );
        assert_eq!(standby_tasks(&owners, "c", 1), BTreeSet::from([t(0, 2)]));
        assert_eq!(standby_tasks(&owners, "a", 1), BTreeSet::from([t(0, 3)]));
        assert_eq!(
            standby_tasks(&owners, "a", 2),
            BTreeSet::from([t(0, 2), t(0, 3)])
        );
        assert_eq!(standby_tasks(&owners, "a", 0), BTreeSet::new());
        let alone: BTreeMap<String, BTreeSet<TaskId>> =
            [("a".to_string(), BTreeSet::from([t(0, 0)]))].into();
        assert_eq!(
            standby_tasks(&alone, "a", 1),
            BTreeSet::new(),
            "no peer, no standby"
        );
    }

    #[test]
    fn a_task_is_claimed_by_one_stream_thread_until_that_thread_releases_it() {
        let registry = StandbyRegistry::default();
        assert!(registry.claim(t(0, 0), 1).unwrap().is_none());
        assert!(
            registry.claim(t(0, 0), 1).unwrap().is_none(),
            "again by its owner"
        );
        match registry.claim(t(0, 0), 0) {
            Err(StreamsError::TaskStillOpen { task, thread }) => {
                assert_eq!((task, thread), (t(0, 0), 1));
            }
            other => panic!(
                "claimed by a second thread: {:?}",
                other.map(|s| s.is_some())
            ),
        }
        let refused = registry.claim(t(0, 0), 0).map(|s| s.is_some());
        assert_eq!(
            refused.map_err(|e| e.recovery()),
            Err(crate::runtime::Recovery::Retry)
        );
        // A failed open by the refused thread releases nothing.
        registry.release(t(0, 0), 0);
        assert!(registry.claim(t(0, 0), 0).is_err());
        registry.release(t(0, 0), 1);
        assert!(registry.claim(t(0, 0), 0).unwrap().is_none());
    }
}
