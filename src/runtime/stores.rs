//! The instance's local state: the locked state directory, the process id
//! kept in it, and the stores tasks open there.
//!
//! Stores of task `t` live in `<state_dir>/<application_id>/<t>/<store>`
//! (RocksDB by default), all sharing one memory budget. The process id (a
//! random id written once to `<state_dir>/<application_id>/process.id`) names
//! this instance across restarts; transactional ids derive from it, so a
//! restarted instance fences its own previous incarnation.

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::config::StreamsConfig;
use crate::metrics::Metrics;
use crate::metrics::store::{MeteredKeyValueStore, MeteredSessionStore, MeteredWindowStore};
use crate::processor::{StoreProvider, StoreSpec, TaskConfig, TaskError, TaskId, TaskInstance};
use crate::state::{
    KeyValueStore, RocksDbMemory, SessionStore, StateConfig, StateDirectory, StoreError,
    WindowStore, open_key_value_store, open_session_store, open_window_store,
};
use crate::topology::Topology;

/// The locked state directory of this instance and its process id.
pub(crate) struct InstanceState {
    dir: Mutex<StateDirectory>,
    process_id: String,
    memory: RocksDbMemory,
    state_config: StateConfig,
    metrics: Arc<Metrics>,
}

impl InstanceState {
    /// Opens and locks `<state_dir>/<application_id>`; fails when another
    /// instance holds it.
    pub(crate) fn open(config: &StreamsConfig, metrics: Arc<Metrics>) -> Result<Self, StoreError> {
        let state_config = StateConfig {
            state_dir: config.state_dir.clone(),
            memory_budget_bytes: config.state_memory_budget_bytes,
            cache_max_bytes: config.cache_max_bytes,
            background_commit_writes: config.state_background_commit_writes,
            ..StateConfig::default()
        };
        let dir = StateDirectory::open(&state_config, &config.application_id)?;
        let process_id = read_or_create_process_id(dir.path())?;
        Ok(InstanceState {
            memory: RocksDbMemory::new(&state_config),
            dir: Mutex::new(dir),
            process_id,
            state_config,
            metrics,
        })
    }

    /// This instance's process id.
    pub(crate) fn process_id(&self) -> &str {
        &self.process_id
    }

    /// Deletes the local state of task `id` (its stores must be closed), so
    /// that it is restored from its changelogs in full when opened again.
    pub(crate) fn wipe_task(&self, id: TaskId) -> Result<(), StoreError> {
        let dir = self
            .dir
            .lock()
            .expect("state dir lock")
            .path()
            .join(id.to_string());
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StoreError::io(dir, e)),
            _ => Ok(()),
        }
    }

    /// The task directories present in this application's directory.
    pub(crate) fn task_ids(&self) -> Result<Vec<String>, StoreError> {
        self.dir.lock().expect("state dir lock").task_ids()
    }

    /// Opens task `id` of `topology` with its stores in this directory.
    pub(crate) fn open_task(
        self: &Arc<Self>,
        topology: &Arc<Topology>,
        id: TaskId,
        config: &TaskConfig,
    ) -> Result<TaskInstance, TaskError> {
        TaskInstance::new(topology.clone(), id, config.clone(), &mut self.provider())
    }

    /// A provider opening stores of tasks in this directory.
    pub(crate) fn provider(self: &Arc<Self>) -> TaskStoreProvider {
        TaskStoreProvider {
            state: self.clone(),
        }
    }
}

fn read_or_create_process_id(app_dir: &Path) -> Result<String, StoreError> {
    let path = app_dir.join("process.id");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(StoreError::Io { path, source: e }),
    }
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.write_u32(std::process::id());
    let id = format!("{:016x}", hasher.finish());
    let tmp = app_dir.join("process.id.tmp");
    std::fs::write(&tmp, &id).map_err(|e| StoreError::Io {
        path: tmp.clone(),
        source: e,
    })?;
    std::fs::rename(&tmp, &path).map_err(|e| StoreError::Io { path, source: e })?;
    Ok(id)
}

/// Opens task stores in the instance's state directory.
pub(crate) struct TaskStoreProvider {
    state: Arc<InstanceState>,
}

impl TaskStoreProvider {
    fn store_dir(
        &self,
        task: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<std::path::PathBuf, StoreError> {
        self.state
            .dir
            .lock()
            .expect("state dir lock")
            .store_dir(&task.to_string(), spec.name)
    }
}

impl StoreProvider for TaskStoreProvider {
    fn window_store(
        &mut self,
        task: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Box<dyn WindowStore>, StoreError> {
        let (retention_ms, segment_ms) = spec.retention()?;
        let store = open_window_store(
            self.state.state_config.default_backend,
            &self.store_dir(task, spec)?,
            spec.name,
            &self.state.memory,
            retention_ms,
            segment_ms,
        )?;
        let metrics = self.state.metrics.clone();
        Ok(Box::new(MeteredWindowStore::new(
            store,
            metrics,
            &task.to_string(),
        )))
    }

    fn session_store(
        &mut self,
        task: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Box<dyn SessionStore>, StoreError> {
        let (retention_ms, segment_ms) = spec.retention()?;
        let store = open_session_store(
            self.state.state_config.default_backend,
            &self.store_dir(task, spec)?,
            spec.name,
            &self.state.memory,
            retention_ms,
            segment_ms,
        )?;
        let metrics = self.state.metrics.clone();
        Ok(Box::new(MeteredSessionStore::new(
            store,
            metrics,
            &task.to_string(),
        )))
    }

    fn key_value_store(
        &mut self,
        task: TaskId,
        spec: &StoreSpec<'_>,
    ) -> Result<Box<dyn KeyValueStore>, StoreError> {
        let path = self.store_dir(task, spec)?;
        let store = open_key_value_store(
            self.state.state_config.default_backend,
            &path,
            spec.name,
            &self.state.memory,
        )?;
        let metrics = self.state.metrics.clone();
        Ok(Box::new(MeteredKeyValueStore::new(
            store,
            metrics,
            &task.to_string(),
        )))
    }
}
