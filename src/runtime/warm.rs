//! Opening the tasks found in the local state directory while the instance
//! joins its group.
//!
//! Opening a RocksDB store that holds data replays its write-ahead log and
//! syncs new files: tens of milliseconds per store, which a restarted
//! instance would otherwise spend after its assignment arrives, before its
//! tail restores can start. At start-up every task directory of this
//! application is opened in the background ([`WarmTasks::start`], on up to
//! one thread per core) while the consumer joins. A stream thread assigned
//! one of them takes it over ([`WarmTasks::take`], waiting if it is still
//! being opened) and restores its tail as usual; so does the standby thread
//! for a standby task. Once the instance runs (every thread has its tasks),
//! or when it stops, the ones nobody took are closed
//! ([`WarmTasks::close_rest`]). A task is never open twice: `take` waits for
//! an open under way, and `close_rest` waits for every open to end.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::stores::InstanceState;
use crate::processor::{TaskConfig, TaskId, TaskInstance};
use crate::topology::Topology;

/// Tasks opened ahead of their assignment; see the module docs.
#[derive(Default)]
pub(crate) struct WarmTasks {
    inner: Mutex<Warm>,
    changed: Condvar,
}

#[derive(Default)]
struct Warm {
    /// Being opened now.
    opening: HashSet<TaskId>,
    /// Opened and not taken yet.
    open: HashMap<TaskId, TaskInstance>,
    /// No more tasks are kept: those still opening are closed when done.
    closed: bool,
}

impl WarmTasks {
    /// Starts opening every task with a directory in `stores`' application
    /// directory that `topology` has.
    pub(crate) fn start(
        stores: &Arc<InstanceState>,
        topology: &Arc<Topology>,
        task_config: &TaskConfig,
    ) -> Arc<Self> {
        let warm = Arc::new(WarmTasks::default());
        let ids: Vec<TaskId> = match stores.task_ids() {
            Ok(names) => names
                .iter()
                .filter_map(|name| parse_task_id(name))
                .filter(|id| id.subtopology < topology.subtopology_count())
                .collect(),
            Err(e) => {
                tracing::debug!(error = %e, "not opening local tasks ahead: listing them failed");
                Vec::new()
            }
        };
        if ids.is_empty() {
            return warm;
        }
        warm.lock().opening.extend(ids.iter().copied());
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(ids.len());
        for w in 0..threads {
            let mine: Vec<TaskId> = ids.iter().copied().skip(w).step_by(threads).collect();
            let (ahead, stores, topology, task_config) = (
                warm.clone(),
                stores.clone(),
                topology.clone(),
                task_config.clone(),
            );
            let spawned = std::thread::Builder::new()
                .name(format!("weir-warm-{w}"))
                .spawn({
                    let mine = mine.clone();
                    move || {
                        for id in mine {
                            let mut provider = stores.provider();
                            let task = TaskInstance::new(
                                topology.clone(),
                                id,
                                task_config.clone(),
                                &mut provider,
                            );
                            ahead.opened(id, task.map_err(|e| e.to_string()));
                        }
                    }
                });
            if let Err(e) = spawned {
                tracing::debug!(error = %e, "not opening local tasks ahead: no thread");
                let mut w = warm.lock();
                for id in &mine {
                    w.opening.remove(id);
                }
                drop(w);
                warm.changed.notify_all();
            }
        }
        warm
    }

    fn lock(&self) -> MutexGuard<'_, Warm> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps (or, once closed, closes) a task an opener finished.
    fn opened(&self, id: TaskId, task: Result<TaskInstance, String>) {
        let mut w = self.lock();
        match task {
            Ok(task) if !w.closed => {
                w.open.insert(id, task);
            }
            Ok(task) => close(id, task),
            // Its thread opens it again and handles the error.
            Err(e) => tracing::debug!(task = %id, error = %e, "opening a local task ahead failed"),
        }
        w.opening.remove(&id);
        drop(w);
        self.changed.notify_all();
    }

    /// Takes task `id` if it was opened ahead (waiting while it is being
    /// opened); `None` when it was not, or is closed.
    pub(crate) fn take(&self, id: TaskId) -> Option<TaskInstance> {
        let mut w = self.lock();
        while w.opening.contains(&id) {
            w = self.changed.wait(w).unwrap_or_else(|e| e.into_inner());
        }
        w.open.remove(&id)
    }

    /// Closes the tasks nobody took, after the opens under way end; keeps
    /// none from then on.
    pub(crate) fn close_rest(&self) {
        let mut w = self.lock();
        w.closed = true;
        while !w.opening.is_empty() {
            w = self.changed.wait(w).unwrap_or_else(|e| e.into_inner());
        }
        for (id, task) in w.open.drain() {
            close(id, task);
        }
    }

    /// Tasks opened ahead and not taken, once the opens under way end
    /// (tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> Vec<TaskId> {
        let mut w = self.lock();
        while !w.opening.is_empty() {
            w = self.changed.wait(w).unwrap_or_else(|e| e.into_inner());
        }
        let mut ids: Vec<TaskId> = w.open.keys().copied().collect();
        ids.sort();
        ids
    }
}

fn close(id: TaskId, mut task: TaskInstance) {
    tracing::debug!(task = %id, "closing a local task opened ahead: not assigned here");
    if let Err(e) = task.close() {
        tracing::warn!(task = %id, error = %e, "closing a local task opened ahead failed");
    }
}

/// The task id of a task directory's name (`<subtopology>_<partition>`).
fn parse_task_id(name: &str) -> Option<TaskId> {
    let (subtopology, partition) = name.split_once('_')?;
    Some(TaskId {
        subtopology: subtopology.parse().ok()?,
        partition: partition.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{WarmTasks, parse_task_id};
    use crate::config::StreamsConfig;
    use crate::metrics::Metrics;
    use crate::processor::{TaskId, TaskInstance};
    use crate::runtime::changelog::tests::word_count;
    use crate::runtime::stores::InstanceState;

    #[test]
    fn task_directory_names_parse_as_task_ids() {
        assert_eq!(
            parse_task_id("2_11"),
            Some(TaskId {
                subtopology: 2,
                partition: 11
            })
        );
        assert_eq!(parse_task_id("global"), None);
        assert_eq!(parse_task_id("1_x"), None);
        assert_eq!(parse_task_id("_1"), None);
    }

    #[test]
    fn local_tasks_opened_ahead_are_taken_once_and_the_rest_closed() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = StreamsConfig::new("warm", "127.0.0.1:9");
        config.state_dir = dir.path().to_path_buf();
        let stores =
            Arc::new(InstanceState::open(&config, Arc::new(Metrics::new("warm"))).unwrap());
        let topology = Arc::new(word_count());
        let task_config = config.task_config();
        let id = |partition| TaskId {
            subtopology: 1,
            partition,
        };
        let open = |partition| {
            TaskInstance::new(
                topology.clone(),
                id(partition),
                task_config.clone(),
                &mut stores.provider(),
            )
        };
        for partition in 0..3 {
            open(partition).unwrap().close().unwrap();
        }
        // Not a task of this topology: left alone.
        std::fs::create_dir_all(dir.path().join("warm").join("7_0")).unwrap();

        let warm = WarmTasks::start(&stores, &topology, &task_config);
        let taken = warm.take(id(0)).expect("task 1_0 was opened ahead");
        assert_eq!(taken.id(), id(0));
        assert!(warm.take(id(0)).is_none(), "a task is taken once");
        assert_eq!(warm.held(), vec![id(1), id(2)]);
        assert!(
            open(1).is_err(),
            "a task held open ahead locks its RocksDB stores"
        );

        warm.close_rest();
        assert!(warm.held().is_empty());
        assert!(warm.take(id(2)).is_none(), "closed, not handed out");
        open(1).expect("a task closed by close_rest opens again");
        open(2).expect("a task closed by close_rest opens again");
    }
}
