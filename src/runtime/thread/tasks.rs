//! The task manager: the active tasks of a stream thread, the offsets they
//! consumed since the last commit, and their lifecycle (Kafka Streams'
//! `TaskManager`).
//!
//! # Invariants
//!
//! * `offsets` holds, per input partition, the offset after the last record
//!   processed since the last commit; it is cleared by a commit and by an
//!   abort, never otherwise.
//! * A task is in `tasks` only when it was created, restored and
//!   initialized; tasks leave it only through [`TaskManager::close_all`],
//!   which also hands them back to the [`TaskCreator`].
//! * [`TaskManager::abort_all`] drops every task's uncommitted store writes:
//!   after it, stores hold exactly what the last commit wrote.

use std::collections::{BTreeMap, HashMap};

use rdkafka::{Offset, TopicPartitionList};

use crate::processor::{InputRecord, RecordCollector, TaskId, TaskInstance, TaskMetrics};
use crate::runtime::StreamsError;
use crate::runtime::topics::TopicLayout;

/// topic → partition → next offset to commit (last processed + 1).
pub(crate) type ConsumedOffsets = HashMap<String, HashMap<i32, i64>>;

/// Creates the tasks a thread is assigned (Kafka Streams' task creator).
pub(crate) trait TaskCreator {
    /// Creates task `id` and restores its stores: the result is ready to be
    /// initialized. `stream_time` is the stream time of the last commit.
    fn create(
        &mut self,
        id: TaskId,
        stream_time: Option<i64>,
    ) -> Result<TaskInstance, StreamsError>;
    /// Task `id` was closed (or failed to open): the thread no longer owns it.
    fn released(&mut self, id: TaskId);
}

/// A stream thread's active tasks; see the module docs.
#[derive(Default)]
pub(crate) struct TaskManager {
    tasks: BTreeMap<TaskId, TaskInstance>,
    offsets: ConsumedOffsets,
    /// Something was processed or punctuated since the last commit.
    commit_needed: bool,
}

impl TaskManager {
    /// The number of active tasks.
    pub(crate) fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether anything was processed or punctuated since the last commit.
    pub(crate) fn commit_needed(&self) -> bool {
        self.commit_needed
    }

    /// Each task's id and metrics.
    pub(crate) fn metrics(&self) -> impl Iterator<Item = (&TaskId, TaskMetrics)> {
        self.tasks.iter().map(|(id, t)| (id, t.metrics()))
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
        crate::runtime::stream_time::annotate(&mut tpl, layout, |id| {
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

    /// Closes every task and hands it back to `creator`.
    pub(crate) fn close_all(&mut self, creator: &mut dyn TaskCreator) {
        for (id, mut task) in std::mem::take(&mut self.tasks) {
            if let Err(e) = task.close() {
                tracing::warn!(task = %id, error = %e, "closing task failed");
            }
            creator.released(id);
        }
        self.offsets.clear();
        self.commit_needed = false;
    }

    /// Creates, restores and initializes tasks `ids` (with the stream times
    /// of the last commit) at wall-clock time `now_ms`. Tasks opened before
    /// an error stay open.
    pub(crate) fn open(
        &mut self,
        ids: &[TaskId],
        stream_times: &HashMap<TaskId, i64>,
        creator: &mut dyn TaskCreator,
        now_ms: i64,
        collector: &mut dyn RecordCollector,
    ) -> Result<(), StreamsError> {
        for &id in ids {
            if self.tasks.contains_key(&id) {
                continue;
            }
            let mut task = creator.create(id, stream_times.get(&id).copied())?;
            if let Err(e) = task.initialize(now_ms, collector) {
                let _ = task.close();
                creator.released(id);
                return Err(e.into());
            }
            self.tasks.insert(id, task);
        }
        Ok(())
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
