//! Standby replicas: warm copies of other instances' task state, kept by
//! reading their changelogs, so a task that moves here after a failure
//! restores only the last few records instead of its whole changelog
//! (Kafka Streams' `num.standby.replicas`).
//!
//! # Placement
//!
//! librdkafka cannot plug in Kafka Streams' assignor, so placement is
//! computed outside the group protocol from what every member can read: the
//! group's members and their assignments (`DescribeGroups`). Members are
//! grouped into instances by the process id in their `client.id`; the
//! instances are sorted by process id; the standbys of a task are the
//! `num_standby_replicas` instances that follow its active owner in that
//! cyclic order. Every instance computes the same placement and keeps the
//! tasks it is named for. Only tasks with logged stores have standbys.
//!
//! # Invariants
//!
//! * A task is open at most once per instance: as an active task of a stream
//!   thread or as a standby, never both. [`StandbyRegistry`] holds both sets
//!   under one lock; a stream thread [`claim`](StandbyRegistry::claim)s a
//!   task before opening it and takes over a standby copy if one exists
//!   (committed up to the last applied changelog record, so its restore
//!   reads only the tail).
//! * A standby applies changelog records read with `read_committed`, so
//!   records of aborted transactions never enter it, and commits them with
//!   the offset of the last one applied, exactly as a restore does.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::StreamsError;
use super::end_of_partition::RestoreConsumer;
use super::thread::ThreadEnv;
use crate::metrics::Metrics;
use crate::processor::{TaskId, TaskInstance};

/// How often the group's membership is read again.
const PLACEMENT_INTERVAL: Duration = Duration::from_secs(3);
/// How often standby stores commit what they applied.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5);

/// A standby task: an uninitialized task whose stores follow the changelog.
pub(crate) struct StandbyTask {
    task: TaskInstance,
    /// changelog topic → offset of the last record applied, not yet committed.
    applied: HashMap<String, i64>,
}

impl StandbyTask {
    /// Commits the applied records with their changelog offsets.
    fn checkpoint(&mut self) -> Result<(), StreamsError> {
        if !self.applied.is_empty() {
            let applied = std::mem::take(&mut self.applied);
            self.task.commit(|topic| applied.get(topic).copied())?;
        }
        Ok(())
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
    active: BTreeSet<TaskId>,
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

    /// Marks `id` active on a stream thread; returns its standby copy, if
    /// this instance kept one, for the thread to take over.
    pub(crate) fn claim(&self, id: TaskId) -> Option<StandbyTask> {
        let mut registry = self.lock();
        registry.active.insert(id);
        let standby = registry.standby.remove(&id)?;
        registry.publish_count();
        if let Some(m) = &registry.metrics {
            m.standby_takeovers.inc();
        }
        Some(standby)
    }

    /// `id` is no longer active here (its task was closed).
    pub(crate) fn release(&self, id: TaskId) {
        self.lock().active.remove(&id);
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

/// The process id in a member's `client.id` (`<app>-<process id>-<thread>-consumer`).
fn process_of(client_id: &str, application_id: &str) -> Option<String> {
    let rest = client_id
        .strip_prefix(application_id)?
        .strip_prefix('-')?
        .strip_suffix("-consumer")?;
    let (process, thread) = rest.rsplit_once('-')?;
    thread.parse::<usize>().ok()?;
    Some(process.to_string())
}

/// Decodes a consumer-protocol assignment: `(topic, partitions)` pairs.
fn parse_assignment(bytes: &[u8]) -> Option<Vec<(String, Vec<i32>)>> {
    let mut at = 2; // version
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = bytes.get(at..at + n)?;
        at += n;
        Some(s)
    };
    let i32_of = |s: &[u8]| i32::from_be_bytes([s[0], s[1], s[2], s[3]]);
    let topics = i32_of(take(4)?);
    let mut out = Vec::new();
    for _ in 0..topics.max(0) {
        let len = i16::from_be_bytes(take(2)?.try_into().ok()?) as usize;
        let topic = String::from_utf8(take(len)?.to_vec()).ok()?;
        let count = i32_of(take(4)?);
        let mut partitions = Vec::new();
        for _ in 0..count.max(0) {
            partitions.push(i32_of(take(4)?));
        }
        out.push((topic, partitions));
    }
    Some(out)
}

/// The tasks `me` keeps as standbys, given each instance's active tasks.
fn standby_tasks(
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

/// Runs the standby thread of this instance until shutdown.
pub(crate) fn run(
    env: Arc<ThreadEnv>,
    registry: Arc<StandbyRegistry>,
    process_id: String,
) -> Result<(), StreamsError> {
    let config = &env.config;
    let consumer: RestoreConsumer = super::clients::restore_consumer(config)?;
    registry.lock().metrics = Some(env.metrics.clone());
    let logged: BTreeSet<u32> = env
        .topology
        .subtopologies
        .iter()
        .enumerate()
        .filter(|(_, sub)| sub.stores.iter().any(|&s| env.topology.stores[s].logging))
        .map(|(i, _)| i as u32)
        .collect();
    let mut last_placement: Option<Instant> = None;
    let mut last_checkpoint = Instant::now();
    let mut assigned: BTreeSet<TaskId> = BTreeSet::new();
    // changelog topic → (sub-topology, store), to route records to stores.
    let mut store_of_changelog: HashMap<String, (u32, String)> = HashMap::new();
    while !env.shutdown.load(Ordering::SeqCst) {
        if last_placement.is_none_or(|t| t.elapsed() >= PLACEMENT_INTERVAL) {
            last_placement = Some(Instant::now());
            match desired_standbys(&env, &consumer, &process_id, &logged) {
                Ok(desired) => {
                    update_standbys(&env, &registry, &desired, &mut store_of_changelog)?;
                }
                Err(e) => tracing::debug!(error = %e, "reading the group for standby placement"),
            }
            let current: BTreeSet<TaskId> = registry.lock().standby.keys().copied().collect();
            if current != assigned {
                assign(&registry, &consumer)?;
                assigned = current;
            }
        }
        if assigned.is_empty() {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let deadline = Instant::now() + Duration::from_millis(200);
        let mut applied = 0;
        while Instant::now() < deadline {
            let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) else {
                continue;
            };
            let Some((sub, store)) = store_of_changelog.get(m.topic()) else {
                continue;
            };
            let id = TaskId {
                subtopology: *sub,
                partition: m.partition(),
            };
            let mut reg = registry.lock();
            let Some(standby) = reg.standby.get_mut(&id) else {
                continue;
            };
            standby
                .task
                .restore(store, m.key().unwrap_or_default(), m.payload())?;
            match standby.applied.get_mut(m.topic()) {
                Some(offset) => *offset = m.offset(),
                None => {
                    standby.applied.insert(m.topic().to_string(), m.offset());
                }
            }
            applied += 1;
        }
        env.metrics.standby_applied.inc_by(applied);
        if last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL {
            last_checkpoint = Instant::now();
            for standby in registry.lock().standby.values_mut() {
                standby.checkpoint()?;
            }
        }
    }
    registry.close_all();
    Ok(())
}

/// Reads the group and computes the standby tasks of this instance.
fn desired_standbys(
    env: &ThreadEnv,
    consumer: &RestoreConsumer,
    me: &str,
    logged: &BTreeSet<u32>,
) -> Result<BTreeSet<TaskId>, StreamsError> {
    let app = &env.config.application_id;
    let groups = consumer
        .client()
        .fetch_group_list(Some(app), Duration::from_secs(5))
        .map_err(|e| StreamsError::kafka("describing the group for standby placement", e))?;
    let mut owners: BTreeMap<String, BTreeSet<TaskId>> = BTreeMap::new();
    owners.entry(me.to_string()).or_default();
    for group in groups.groups() {
        for member in group.members() {
            let Some(process) = process_of(member.client_id(), app) else {
                continue;
            };
            let tasks = owners.entry(process).or_default();
            let assignment = member.assignment().and_then(parse_assignment);
            for (topic, partitions) in assignment.unwrap_or_default() {
                let Some(&sub) = env.layout.subtopology_of_topic.get(&topic) else {
                    continue;
                };
                if logged.contains(&sub) {
                    tasks.extend(partitions.into_iter().map(|partition| TaskId {
                        subtopology: sub,
                        partition,
                    }));
                }
            }
        }
    }
    Ok(standby_tasks(&owners, me, env.config.num_standby_replicas))
}

/// Opens standby tasks newly named for this instance and closes the others.
fn update_standbys(
    env: &ThreadEnv,
    registry: &StandbyRegistry,
    desired: &BTreeSet<TaskId>,
    store_of_changelog: &mut HashMap<String, (u32, String)>,
) -> Result<(), StreamsError> {
    let mut reg = registry.lock();
    let stale: Vec<TaskId> = reg
        .standby
        .keys()
        .filter(|id| !desired.contains(id))
        .copied()
        .collect();
    for id in stale {
        if let Some(standby) = reg.standby.remove(&id) {
            tracing::info!(task = %id, "closing standby task");
            standby.close();
        }
    }
    for &id in desired {
        if reg.active.contains(&id) || reg.standby.contains_key(&id) {
            continue;
        }
        let mut provider = env.stores.provider();
        let task = TaskInstance::new(
            env.topology.clone(),
            id,
            env.task_config.clone(),
            &mut provider,
        )?;
        for (store, topic) in task.changelog_topics() {
            store_of_changelog.insert(topic.to_string(), (id.subtopology, store.to_string()));
        }
        tracing::info!(task = %id, "opened standby task");
        reg.standby.insert(
            id,
            StandbyTask {
                task,
                applied: HashMap::new(),
            },
        );
    }
    reg.publish_count();
    Ok(())
}

/// Assigns the changelog partitions of every standby task, each from its
/// store's committed offset + 1.
fn assign(registry: &StandbyRegistry, consumer: &RestoreConsumer) -> Result<(), StreamsError> {
    let mut reg = registry.lock();
    let mut tpl = TopicPartitionList::new();
    for (id, standby) in reg.standby.iter_mut() {
        standby.checkpoint()?;
        let changelogs: Vec<(String, String)> = standby
            .task
            .changelog_topics()
            .map(|(s, t)| (s.to_string(), t.to_string()))
            .collect();
        for (store, topic) in changelogs {
            let offset = match standby.task.store_committed_offset(&store) {
                Some(c) => Offset::Offset(c + 1),
                None => Offset::Beginning,
            };
            tpl.add_partition_offset(&topic, id.partition, offset)
                .map_err(|e| StreamsError::kafka("building the standby assignment", e))?;
        }
    }
    consumer
        .assign(&tpl)
        .map_err(|e| StreamsError::kafka("assigning standby changelog partitions", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(sub: u32, partition: i32) -> TaskId {
        TaskId {
            subtopology: sub,
            partition,
        }
    }

    #[test]
    fn process_ids_come_from_client_ids() {
        assert_eq!(
            process_of("wc-1a2b-c3-0-consumer", "wc").as_deref(),
            Some("1a2b-c3")
        );
        assert_eq!(process_of("other-1a2b-0-consumer", "wc"), None);
        assert_eq!(process_of("wc-1a2b-x-consumer", "wc"), None);
    }

    #[test]
    fn assignments_decode() {
        let mut b = vec![0, 1]; // version 1
        b.extend(1i32.to_be_bytes());
        b.extend(5i16.to_be_bytes());
        b.extend(b"topic");
        b.extend(2i32.to_be_bytes());
        b.extend(0i32.to_be_bytes());
        b.extend(3i32.to_be_bytes());
        b.extend((-1i32).to_be_bytes()); // null user data
        assert_eq!(
            parse_assignment(&b),
            Some(vec![("topic".to_string(), vec![0, 3])])
        );
        assert_eq!(parse_assignment(&b[..9]), None, "truncated");
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
}
