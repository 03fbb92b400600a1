//! The runtime's [`TaskCreator`]: opens an assigned task from this
//! instance's state directory (or takes over its standby copy) and restores
//! its stores from the changelog tail in slices (`restore.rs`), between the
//! stream thread's processing rounds.
//!
//! A task whose local state is corrupt (a store ahead of its changelog,
//! corrupt files) is wiped and restored from the start of its changelogs,
//! once; Kafka Streams' task-corrupted case (`tasks.rs` decides).

use std::sync::Arc;

use super::ThreadEnv;
use super::tasks::TaskCreator;
use crate::metrics::RestoreMeter;
use crate::processor::{TaskId, TaskInstance};
use crate::runtime::StreamsError;
use crate::runtime::end_of_partition::RestoreConsumer;
use crate::runtime::restore::{RestoreBudget, RestoreFailure, SlicedRestore};
use crate::runtime::warm::opening_threads;

/// Opens active tasks for one stream thread.
pub(crate) struct ActiveTaskCreator {
    pub(super) env: Arc<ThreadEnv>,
    /// The stream thread's index: who claims the tasks it opens.
    thread: usize,
    /// Reads changelogs (a consumer without a group).
    restore: SlicedRestore,
}

impl ActiveTaskCreator {
    pub(super) fn new(
        env: Arc<ThreadEnv>,
        thread: usize,
        restore_consumer: RestoreConsumer,
    ) -> Self {
        ActiveTaskCreator {
            env,
            thread,
            restore: SlicedRestore::new(restore_consumer),
        }
    }
}

/// Opens task `id` from this instance's state directory.
fn open_local(env: &ThreadEnv, id: TaskId) -> Result<TaskInstance, StreamsError> {
    Ok(env.stores.open_task(&env.topology, id, &env.task_config)?)
}

impl ActiveTaskCreator {
    /// Claims task `id` for this thread, then returns it when it need not
    /// be opened: this instance's standby copy, or the task opened ahead at
    /// start-up (`warm.rs`). A task another stream thread still has open
    /// is an error ([`StreamsError::TaskStillOpen`]), counted.
    fn take_open(&self, id: TaskId) -> Option<Result<TaskInstance, StreamsError>> {
        match self.env.standbys.claim(id, self.thread) {
            Ok(Some(standby)) => {
                tracing::info!(task = %id, "taking over the standby copy");
                Some(standby.into_task())
            }
            Ok(None) => self.env.warm.take(id).map(Ok),
            Err(e) => {
                self.env.metrics.task_open_waits.inc();
                Some(Err(e))
            }
        }
    }

    /// Queues an opened task for its restore, or gives a failed one up.
    fn opened(
        &mut self,
        id: TaskId,
        task: Result<TaskInstance, StreamsError>,
    ) -> Result<TaskInstance, StreamsError> {
        match task {
            Ok(task) => {
                let meter = RestoreMeter::start(self.env.metrics.clone(), id.to_string());
                self.restore.queue(id, meter);
                Ok(task)
            }
            Err(e) => {
                self.env.standbys.release(id, self.thread);
                Err(e)
            }
        }
    }
}

impl TaskCreator for ActiveTaskCreator {
    fn create(&mut self, id: TaskId) -> Result<TaskInstance, StreamsError> {
        let task = self
            .take_open(id)
            .unwrap_or_else(|| open_local(&self.env, id));
        self.opened(id, task)
    }

    /// Takes standby copies and tasks opened ahead (`warm.rs`), and opens
    /// the others on up to one thread per core: opening a RocksDB store that
    /// holds data replays its write-ahead log and syncs new files, tens of
    /// milliseconds per store, which a rebalance with many tasks otherwise
    /// spends one after another.
    fn create_all(&mut self, ids: &[TaskId]) -> Vec<Result<TaskInstance, StreamsError>> {
        let mut tasks: Vec<Option<Result<TaskInstance, StreamsError>>> =
            ids.iter().map(|&id| self.take_open(id)).collect();
        let local: Vec<usize> = (0..ids.len()).filter(|&i| tasks[i].is_none()).collect();
        let threads = opening_threads(local.len());
        if threads <= 1 {
            for &i in &local {
                tasks[i] = Some(open_local(&self.env, ids[i]));
            }
        } else {
            let env: &ThreadEnv = &self.env;
            let opened: Vec<(usize, Result<TaskInstance, StreamsError>)> =
                std::thread::scope(|scope| {
                    let workers: Vec<_> = (0..threads)
                        .map(|w| {
                            let mine: Vec<usize> =
                                local.iter().copied().skip(w).step_by(threads).collect();
                            scope.spawn(move || {
                                mine.into_iter()
                                    .map(|i| (i, open_local(env, ids[i])))
                                    .collect::<Vec<_>>()
                            })
                        })
                        .collect();
                    workers
                        .into_iter()
                        .flat_map(|w| w.join().expect("a task-opening thread panicked"))
                        .collect()
                });
            for (i, task) in opened {
                tasks[i] = Some(task);
            }
        }
        ids.iter()
            .zip(tasks)
            .map(|(&id, task)| self.opened(id, task.expect("every task was opened")))
            .collect()
    }

    fn restore(
        &mut self,
        tasks: &mut [&mut TaskInstance],
        budget: &mut RestoreBudget,
    ) -> Result<Vec<TaskId>, RestoreFailure> {
        self.restore.restore(tasks, budget)
    }

    fn closing(&mut self, task: &mut TaskInstance) {
        self.restore.forget(task);
    }

    fn wipe(&mut self, id: TaskId) -> Result<(), StreamsError> {
        Ok(self.env.stores.wipe_task(id)?)
    }

    fn released(&mut self, id: TaskId) {
        self.env.standbys.release(id, self.thread);
    }
}
