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

/// Opens active tasks for one stream thread.
pub(crate) struct ActiveTaskCreator {
    pub(super) env: Arc<ThreadEnv>,
    /// Reads changelogs (a consumer without a group).
    restore: SlicedRestore,
}

impl ActiveTaskCreator {
    pub(super) fn new(env: Arc<ThreadEnv>, restore_consumer: RestoreConsumer) -> Self {
        ActiveTaskCreator {
            env,
            restore: SlicedRestore::new(restore_consumer),
        }
    }
}

impl TaskCreator for ActiveTaskCreator {
    fn create(&mut self, id: TaskId) -> Result<TaskInstance, StreamsError> {
        let task = match self.env.standbys.claim(id) {
            Some(standby) => {
                tracing::info!(task = %id, "taking over the standby copy");
                standby.into_task()
            }
            None => {
                let mut provider = self.env.stores.provider();
                TaskInstance::new(
                    self.env.topology.clone(),
                    id,
                    self.env.task_config.clone(),
                    &mut provider,
                )
                .map_err(StreamsError::from)
            }
        };
        match task {
            Ok(task) => {
                let meter = RestoreMeter::start(self.env.metrics.clone(), id.to_string());
                self.restore.queue(id, meter);
                Ok(task)
            }
            Err(e) => {
                self.env.standbys.release(id);
                Err(e)
            }
        }
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
        self.env.standbys.release(id);
    }
}
