//! The runtime's [`TaskCreator`]: opens an assigned task from this
//! instance's state directory (or takes over its standby copy), restores its
//! stores from the changelog tail and sets the stream time of the last
//! commit.
//!
//! A task whose local state is corrupt (a store ahead of its changelog,
//! corrupt files) is wiped and restored from the start of its changelogs,
//! once; Kafka Streams' task-corrupted case.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ThreadEnv;
use super::tasks::TaskCreator;
use crate::metrics::RestoreMeter;
use crate::processor::{TaskId, TaskInstance};
use crate::runtime::end_of_partition::RestoreConsumer;
use crate::runtime::restore::restore_task;
use crate::runtime::{Recovery, StreamsError};

/// How long restoring one task may take before it is retried.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(300);

/// Opens active tasks for one stream thread.
pub(crate) struct ActiveTaskCreator {
    pub(super) env: Arc<ThreadEnv>,
    /// Reads changelogs (no group).
    pub(super) restore_consumer: RestoreConsumer,
}

impl ActiveTaskCreator {
    fn open_restored(&mut self, id: TaskId) -> Result<TaskInstance, StreamsError> {
        let mut task = match self.env.standbys.claim(id) {
            Some(standby) => {
                tracing::info!(task = %id, "taking over the standby copy");
                standby.into_task()?
            }
            None => {
                let mut provider = self.env.stores.provider();
                TaskInstance::new(
                    self.env.topology.clone(),
                    id,
                    self.env.task_config.clone(),
                    &mut provider,
                )?
            }
        };
        let started = Instant::now();
        let mut meter = RestoreMeter::start(self.env.metrics.clone(), id.to_string());
        let restored = restore_task(
            &mut task,
            &self.restore_consumer,
            RESTORE_TIMEOUT,
            &mut meter,
        );
        drop(meter);
        let stats = match restored {
            Ok(stats) => stats,
            Err(e) => {
                let _ = task.close();
                return Err(e);
            }
        };
        if stats.changelog_size > 0 {
            tracing::info!(
                task = %id,
                restored = stats.restored,
                changelog_records = stats.changelog_size,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "restored task"
            );
        }
        Ok(task)
    }
}

impl TaskCreator for ActiveTaskCreator {
    fn create(
        &mut self,
        id: TaskId,
        stream_time: Option<i64>,
    ) -> Result<TaskInstance, StreamsError> {
        let mut task = match self.open_restored(id) {
            Ok(task) => task,
            Err(e) if e.recovery() == Recovery::TaskCorrupted => {
                tracing::warn!(task = %id, error = %e, "local state is corrupt: wiping it and restoring from the changelog");
                self.env.stores.wipe_task(id)?;
                self.open_restored(id)
                    .inspect_err(|_| self.env.standbys.release(id))?
            }
            Err(e) => {
                self.env.standbys.release(id);
                return Err(e);
            }
        };
        if let Some(time) = stream_time {
            task.restore_stream_time(time)?;
        }
        Ok(task)
    }

    fn released(&mut self, id: TaskId) {
        self.env.standbys.release(id);
    }
}
