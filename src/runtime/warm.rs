//! Opening the tasks found in the local state directory while the instance
//! joins its group.
//!
//! Opening a RocksDB store that holds data replays its write-ahead log and
//! syncs new files: tens of milliseconds per store, which a restarted
//! instance would otherwise spend after its assignment arrives, before its
//! tail restores can start. At start-up every task directory of this
//! application is queued and opened in the background
//! ([`WarmTasks::start`], on up to one thread per core) while the consumer
//! joins. A stream thread assigned one of them takes it over
//! ([`WarmTasks::take`], waiting if it is being opened; one still queued
//! leaves the queue and the thread opens it itself) and restores its tail as
//! usual; so does the standby thread for a standby task. Once the instance
//! runs (every thread has its tasks), or when it stops, the ones nobody took
//! are closed ([`WarmTasks::close_rest`]). A task is never open twice:
//! `take` waits for an open under way, and `close_rest` waits for every open
//! to end.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::stores::InstanceState;
use crate::processor::{TaskConfig, TaskId, TaskInstance};
use crate::topology::Topology;

/// Tasks opened ahead of their assignment; see the module docs.
#[derive(Default)]
pub(crate) struct WarmTasks {
    inner: Mutex<Warm>,
    changed: Condvar,
    /// The opening threads, joined by [`WarmTasks::close_rest`].
    openers: Mutex<Vec<JoinHandle<()>>>,
}

#[derive(Default)]
struct Warm {
    /// Not started yet, in the order they are opened.
    queued: VecDeque<TaskId>,
    /// Being opened now.
    opening: HashSet<TaskId>,
    /// Opened and not taken yet.
    open: HashMap<TaskId, TaskInstance>,
    /// No more tasks are kept: those still opening are closed when done.
    closed: bool,
}

/// What an opening thread needs.
struct Opener {
    warm: Arc<WarmTasks>,
    stores: Arc<InstanceState>,
    topology: Arc<Topology>,
    task_config: TaskConfig,
}

impl Opener {
    /// Opens queued tasks until none is left.
    fn run(self) {
        while let Some(id) = self.warm.next() {
            let task = self.stores.open_task(&self.topology, id, &self.task_config);
            self.warm.opened(id, task.map_err(|e| e.to_string()));
        }
    }
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
        let ids: VecDeque<TaskId> = match stores.task_ids() {
            Ok(names) => names
                .iter()
                .filter_map(|name| parse_task_id(name))
                .filter(|id| id.subtopology < topology.subtopology_count())
                .collect(),
            Err(e) => {
                tracing::debug!(error = %e, "not opening local tasks ahead: listing them failed");
                VecDeque::new()
            }
        };
        let threads = opening_threads(ids.len());
        warm.lock().queued = ids;
        let mut openers = warm.openers.lock().unwrap_or_else(|e| e.into_inner());
        for n in 0..threads {
            let opener = Opener {
                warm: warm.clone(),
                stores: stores.clone(),
                topology: topology.clone(),
                task_config: task_config.clone(),
            };
            match std::thread::Builder::new()
                .name(format!("weir-warm-{n}"))
                .spawn(move || opener.run())
            {
                Ok(handle) => openers.push(handle),
                Err(e) => tracing::debug!(error = %e, "one thread fewer opens local tasks ahead"),
            }
        }
        if openers.is_empty() {
            // Nobody will open them: their threads open them as usual.
            warm.lock().queued.clear();
        }
        drop(openers);
        warm
    }

    fn lock(&self) -> MutexGuard<'_, Warm> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next task to open, marked as being opened.
    fn next(&self) -> Option<TaskId> {
        let mut w = self.lock();
        let id = w.queued.pop_front()?;
        w.opening.insert(id);
        Some(id)
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

    /// Takes task `id` if it was opened ahead, waiting while it is being
    /// opened; `None` when it was not (the caller opens it), also when it
    /// was still queued: it is not opened ahead then, so a thread never
    /// waits for other tasks' opens.
    pub(crate) fn take(&self, id: TaskId) -> Option<TaskInstance> {
        let mut w = self.lock();
        w.queued.retain(|&queued| queued != id);
        while w.opening.contains(&id) {
            w = self.changed.wait(w).unwrap_or_else(|e| e.into_inner());
        }
        w.open.remove(&id)
    }

    /// Closes the tasks nobody took, after the opens under way end, and
    /// joins the opening threads; keeps none from then on.
    pub(crate) fn close_rest(&self) {
        let mut w = self.lock();
        w.closed = true;
        w.queued.clear();
        while !w.opening.is_empty() {
            w = self.changed.wait(w).unwrap_or_else(|e| e.into_inner());
        }
        for (id, task) in w.open.drain() {
            close(id, task);
        }
        drop(w);
        let openers = std::mem::take(&mut *self.openers.lock().unwrap_or_else(|e| e.into_inner()));
        for opener in openers {
            let _ = opener.join();
        }
    }

    /// Tasks opened ahead and not taken, once the opens end (tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> Vec<TaskId> {
        let mut w = self.lock();
        while !w.queued.is_empty() || !w.opening.is_empty() {
            w = self.changed.wait(w).unwrap_or_else(|e| e.into_inner());
        }
        let mut ids: Vec<TaskId> = w.open.keys().copied().collect();
        ids.sort();
        ids
    }
}

/// Threads that open `tasks` tasks at once: one per core, at most one per
/// task.
pub(crate) fn opening_threads(tasks: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(tasks)
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
    use crate::processor::TaskId;
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
        let open = |partition| stores.open_task(&topology, id(partition), &task_config);
        for partition in 0..3 {
            open(partition).unwrap().close().unwrap();
        }
        // Not a task of this topology: left alone.
        std::fs::create_dir_all(dir.path().join("warm").join("7_0")).unwrap();

        let warm = WarmTasks::start(&stores, &topology, &task_config);
        assert_eq!(warm.held(), vec![id(0), id(1), id(2)]);
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

    #[test]
    fn a_task_still_queued_is_left_to_its_thread() {
        let warm = WarmTasks::default();
        let id = TaskId {
            subtopology: 0,
            partition: 4,
        };
        warm.lock().queued.push_back(id);
        assert!(warm.take(id).is_none(), "not waited for");
        assert!(warm.lock().queued.is_empty(), "and no longer opened ahead");
    }
}
