//! The task manager: the active tasks of a stream thread, the offsets they
//! consumed since the last commit, and their lifecycle (Kafka Streams'
//! `TaskManager`).
//!
//! # Invariants
//!
//! * `offsets` holds, per input partition, the offset after the last record
//!   processed since the last commit; it is cleared by a commit and by an
//!   abort, never otherwise.
//! * An assigned task is first in `restoring` (created, stores possibly
//!   behind their changelogs), then in `tasks` once every store is current
//!   and it was initialized; only tasks in `tasks` are processed, punctuated
//!   and committed. Tasks leave both only through
//!   [`TaskManager::close_all`] or [`TaskManager::close`] (after a commit),
//!   which also hand them back to the [`TaskCreator`].
//! * [`TaskManager::abort_all`] drops every task's uncommitted store writes:
//!   after it, stores hold exactly what the last commit wrote.

use std::collections::{BTreeMap, HashMap, VecDeque};

use rustc_hash::FxHashMap;

use rdkafka::{Offset, TopicPartitionList};

use crate::processor::{InputRecord, RecordCollector, TaskId, TaskInstance, TaskMetrics};
use crate::runtime::restore::{RestoreBudget, RestoreFailure};
use crate::runtime::topics::TopicLayout;
use crate::runtime::{Recovery, StreamsError};

/// topic → partition → next offset to commit (last processed + 1).
pub(crate) type ConsumedOffsets = FxHashMap<String, FxHashMap<i32, i64>>;

/// Creates and restores the tasks a thread is assigned (Kafka Streams' task
/// creator and state updater).
pub(crate) trait TaskCreator {
    /// Creates task `id` from local state (or a standby copy); its stores
    /// may still be behind their changelogs.
    fn create(&mut self, id: TaskId) -> Result<TaskInstance, StreamsError>;
    /// Creates tasks `ids` as [`TaskCreator::create`] does, one result per
    /// id in order; a creator may open them concurrently.
    fn create_all(&mut self, ids: &[TaskId]) -> Vec<Result<TaskInstance, StreamsError>> {
        ids.iter().map(|&id| self.create(id)).collect()
    }
    /// Restores the stores of `tasks` (the restoring ones, first come first)
    /// within `budget`; returns those whose stores are all current.
    fn restore(
        &mut self,
        tasks: &mut [&mut TaskInstance],
        budget: &mut RestoreBudget,
    ) -> Result<Vec<TaskId>, RestoreFailure>;
    /// `task` is about to close while restoring: keep what was restored.
    fn closing(&mut self, task: &mut TaskInstance);
    /// Deletes the local state of task `id` (closed).
    fn wipe(&mut self, id: TaskId) -> Result<(), StreamsError>;
    /// Task `id` was closed (or failed to open): the thread no longer owns it.
    fn released(&mut self, id: TaskId);
}

/// A task whose stores are being restored: it is processed only once all
/// of them are current.
struct Restoring {
    task: TaskInstance,
    /// The stream time of the last commit.
    stream_time: Option<i64>,
    /// Its local state was wiped once already (corrupt).
    wiped: bool,
}

/// A stream thread's active tasks; see the module docs.
#[derive(Default)]
pub(crate) struct TaskManager {
    tasks: BTreeMap<TaskId, TaskInstance>,
    /// Assigned tasks still restoring, in the order they are restored.
    restoring: VecDeque<Restoring>,
    offsets: ConsumedOffsets,
    /// Something was processed or punctuated since the last commit.
    commit_needed: bool,
}

impl TaskManager {
    /// The number of tasks, running and restoring.
    pub(crate) fn len(&self) -> usize {
        self.tasks.len() + self.restoring.len()
    }

    /// The number of tasks still restoring.
    pub(crate) fn restoring(&self) -> usize {
        self.restoring.len()
    }

    /// Whether anything was processed or punctuated since the last commit.
    pub(crate) fn commit_needed(&self) -> bool {
        self.commit_needed
    }

    /// Each task's id and metrics.
    pub(crate) fn metrics(&self) -> impl Iterator<Item = (&TaskId, TaskMetrics)> {
        self.tasks.iter().map(|(id, t)| (id, t.metrics()))
    }

    /// The running tasks.
    pub(crate) fn running(&self) -> impl Iterator<Item = &TaskInstance> {
        self.tasks.values()
    }

    /// The tasks still restoring.
    pub(crate) fn restoring_tasks(&self) -> impl Iterator<Item = &TaskInstance> {
        self.restoring.iter().map(|r| &r.task)
    }

    /// Task `id`, when active here.
    pub(crate) fn task(&self, id: TaskId) -> Option<&TaskInstance> {
        self.tasks.get(&id)
    }

    /// Processes `input` in task `id` (which must be active) and records its
    /// offset for the next commit.
    pub(crate) fn process(
        &mut self,
        id: TaskId,
        input: &InputRecord<'_>,
        collector: &mut dyn RecordCollector,
    ) -> Result<bool, StreamsError> {
        let Some(task) = self.tasks.get_mut(&id) else {
            return Ok(false);
        };
        self.commit_needed = true;
        task.process(input, collector)?;
        let partitions = match self.offsets.get_mut(input.topic) {
            Some(p) => p,
            None => self.offsets.entry(input.topic.to_string()).or_default(),
        };
        partitions.insert(input.partition, input.offset + 1);
        Ok(true)
    }

    /// Runs the wall-clock punctuators due at `now_ms`.
    pub(crate) fn punctuate(
        &mut self,
        now_ms: i64,
        collector: &mut dyn RecordCollector,
    ) -> Result<(), StreamsError> {
        for task in self.tasks.values_mut() {
            if task.punctuate_wall_clock(now_ms, collector)? > 0 {
                self.commit_needed = true;
            }
        }
        Ok(())
    }

    /// Forwards every task's record-cache updates (the first step of a commit).
    pub(crate) fn flush_caches(
        &mut self,
        collector: &mut dyn RecordCollector,
    ) -> Result<(), StreamsError> {
        for task in self.tasks.values_mut() {
            task.flush(collector)?;
        }
        Ok(())
    }

    /// The consumed offsets to commit, each with its task's stream time as
    /// metadata ([`crate::runtime::stream_time`]).
    pub(crate) fn offsets_to_commit(&self, layout: &TopicLayout) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for (topic, partitions) in &self.offsets {
            for (&partition, &next) in partitions {
                // Adding a partition with a valid offset cannot fail.
                let _ = tpl.add_partition_offset(topic, partition, Offset::Offset(next));
            }
        }
        crate::runtime::stream_time::annotate(&mut tpl, layout, super::wall_clock_ms(), |id| {
            self.tasks.get(&id).map(TaskInstance::stream_time)
        });
        tpl
    }

    /// Commits every task's stores with the changelog offsets
    /// `changelog_offset(topic, partition)` gives (after the transaction
    /// committed), and returns the consumed offsets now committed.
    pub(crate) fn commit_stores(
        &mut self,
        changelog_offset: impl Fn(&str, i32) -> Option<i64>,
    ) -> Result<ConsumedOffsets, StreamsError> {
        for (id, task) in self.tasks.iter_mut() {
            let partition = id.partition;
            task.commit(|topic| changelog_offset(topic, partition))?;
        }
        self.commit_needed = false;
        Ok(std::mem::take(&mut self.offsets))
    }

    /// Drops every task's uncommitted store writes and the offsets consumed
    /// since the last commit.
    pub(crate) fn abort_all(&mut self) {
        for task in self.tasks.values_mut() {
            task.abort();
        }
        self.offsets.clear();
        self.commit_needed = false;
    }

    /// Closes every task, running or restoring, and hands it back to
    /// `creator`.
    pub(crate) fn close_all(&mut self, creator: &mut dyn TaskCreator) {
        let mut closing: Vec<(TaskId, TaskInstance)> =
            std::mem::take(&mut self.tasks).into_iter().collect();
        for mut r in std::mem::take(&mut self.restoring) {
            creator.closing(&mut r.task);
            closing.push((r.task.id(), r.task));
        }
        close_each(closing, creator);
        self.offsets.clear();
        self.commit_needed = false;
    }

    /// Closes tasks `ids` (those open, running or restoring) and hands them
    /// back to `creator`; the others go on. Call it right after a commit:
    /// what the closed tasks processed since must not be left uncommitted.
    pub(crate) fn close(&mut self, ids: &[TaskId], creator: &mut dyn TaskCreator) {
        debug_assert!(!self.commit_needed, "closing tasks with uncommitted work");
        let mut closing: Vec<(TaskId, TaskInstance)> = ids
            .iter()
            .filter_map(|id| self.tasks.remove(id).map(|t| (*id, t)))
            .collect();
        let (mut gone, stay): (VecDeque<Restoring>, VecDeque<Restoring>) =
            std::mem::take(&mut self.restoring)
                .into_iter()
                .partition(|r| ids.contains(&r.task.id()));
        self.restoring = stay;
        for r in &mut gone {
            creator.closing(&mut r.task);
        }
        closing.extend(gone.into_iter().map(|r| (r.task.id(), r.task)));
        close_each(closing, creator);
    }

    /// Creates tasks `ids` (those not open yet); they restore before they
    /// run ([`TaskManager::restore`]), then start from the stream times of
    /// the last commit. The tasks created stay when others fail; the first
    /// failure is returned.
    pub(crate) fn open(
        &mut self,
        ids: &[TaskId],
        stream_times: &HashMap<TaskId, i64>,
        creator: &mut dyn TaskCreator,
    ) -> Result<(), StreamsError> {
        let new: Vec<TaskId> = ids
            .iter()
            .copied()
            .filter(|&id| {
                !self.tasks.contains_key(&id) && !self.restoring.iter().any(|r| r.task.id() == id)
            })
            .collect();
        let mut failure = None;
        for (&id, task) in new.iter().zip(creator.create_all(&new)) {
            match task {
                Ok(task) => self.restoring.push_back(Restoring {
                    task,
                    stream_time: stream_times.get(&id).copied(),
                    wiped: false,
                }),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Restores the restoring tasks, together, within `budget`; each task
    /// whose stores are all current is initialized (at wall-clock time
    /// `now_ms`) and runs from then on. A task found corrupt is wiped and
    /// restored from scratch, once. Returns the tasks that started.
    pub(crate) fn restore(
        &mut self,
        creator: &mut dyn TaskCreator,
        budget: &mut RestoreBudget,
        now_ms: i64,
        collector: &mut dyn RecordCollector,
    ) -> Result<usize, StreamsError> {
        let mut tasks: Vec<&mut TaskInstance> =
            self.restoring.iter_mut().map(|r| &mut r.task).collect();
        let restored = creator.restore(&mut tasks, budget);
        drop(tasks);
        let done = match restored {
            Ok(done) => done,
            Err(RestoreFailure {
                task: Some(id),
                error,
            }) if error.recovery() == Recovery::TaskCorrupted => {
                let at = self.restoring.iter().position(|r| r.task.id() == id);
                let Some(at) = at.filter(|&at| !self.restoring[at].wiped) else {
                    return Err(error);
                };
                let mut corrupt = self.restoring.remove(at).expect("found");
                tracing::warn!(task = %id, error = %error, "local state is corrupt: wiping it and restoring from the changelog");
                creator.closing(&mut corrupt.task);
                let _ = corrupt.task.close();
                creator.released(id);
                creator.wipe(id)?;
                corrupt.task = creator.create(id)?;
                corrupt.wiped = true;
                self.restoring.push_front(corrupt);
                return Ok(0);
            }
            Err(failure) => return Err(failure.error),
        };
        let mut started = 0;
        for id in done {
            if let Some(at) = self.restoring.iter().position(|r| r.task.id() == id) {
                let restored = self.restoring.remove(at).expect("found");
                self.start(restored, creator, now_ms, collector)?;
                started += 1;
            }
        }
        Ok(started)
    }

    /// Initializes a restored task and adds it to the running ones.
    fn start(
        &mut self,
        restored: Restoring,
        creator: &mut dyn TaskCreator,
        now_ms: i64,
        collector: &mut dyn RecordCollector,
    ) -> Result<(), StreamsError> {
        let Restoring {
            mut task,
            stream_time,
            ..
        } = restored;
        let id = task.id();
        let initialized = match stream_time {
            Some(time) => task.restore_stream_time(time).map_err(StreamsError::from),
            None => Ok(()),
        }
        .and_then(|()| {
            task.initialize(now_ms, collector)
                .map_err(StreamsError::from)
        });
        if let Err(e) = initialized {
            let _ = task.close();
            creator.released(id);
            return Err(e);
        }
        self.tasks.insert(id, task);
        Ok(())
    }
}

/// Closes each task and hands it back to `creator`.
fn close_each(closing: Vec<(TaskId, TaskInstance)>, creator: &mut dyn TaskCreator) {
    for (id, mut task) in closing {
        if let Err(e) = task.close() {
            tracing::warn!(task = %id, error = %e, "closing task failed");
        }
        creator.released(id);
    }
}

/// The tasks of an assignment: one per sub-topology and partition.
pub(crate) fn task_ids(assignment: &[(String, i32)], layout: &TopicLayout) -> Vec<TaskId> {
    let mut ids: Vec<TaskId> = assignment
        .iter()
        .filter_map(|(topic, partition)| {
            layout
                .subtopology_of_topic
                .get(topic)
                .map(|&subtopology| TaskId {
                    subtopology,
                    partition: *partition,
                })
        })
        .collect();
    ids.sort();
    ids.dedup();
    ids
}
