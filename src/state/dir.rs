//! The state directory: where stores live on disk, and who may use it.
//!
//! Layout: `<state_dir>/<application_id>/<task_id>/<store>/`, one RocksDB
//! instance per store directory.
//!
//! Invariants:
//!
//! * **One instance per application directory.** [`StateDirectory::open`]
//!   takes an exclusive OS file lock (`flock`) on
//!   `<state_dir>/<application_id>/.lock` and holds it until the
//!   `StateDirectory` is dropped; a second opener, in this process or
//!   another, gets [`StoreError::Locked`]. The OS releases the lock when the
//!   process dies, so a crashed instance never leaves a stale lock.
//! * **Unowned task directories are removed after a delay.** A task
//!   directory that this instance does not own is kept for
//!   `cleanup_delay_ms` (counted from [`StateDirectory::release_task`], or
//!   from opening the directory for tasks found on disk), in case the task
//!   comes back after a rebalance; then
//!   [`StateDirectory::clean_unowned`] deletes it.
//!
//! ```
//! use weir::state::{StateConfig, StateDirectory, StoreError};
//!
//! let root = tempfile::tempdir().unwrap();
//! let config = StateConfig { state_dir: root.path().into(), ..StateConfig::default() };
//! let mut dir = StateDirectory::open(&config, "my-app").unwrap();
//! let path = dir.store_dir("0_1", "counts").unwrap(); // <state_dir>/my-app/0_1/counts
//! assert!(path.ends_with("my-app/0_1/counts"));
//! // A second instance on the same directory is refused.
//! assert!(matches!(StateDirectory::open(&config, "my-app"), Err(StoreError::Locked { .. })));
//! ```

use std::collections::HashMap;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{StateConfig, StoreError};

const LOCK_FILE: &str = ".lock";

/// The locked state directory of one application instance.
#[derive(Debug)]
pub struct StateDirectory {
    app_dir: PathBuf,
    _lock: File,
    cleanup_delay: Duration,
    opened_at: Instant,
    released: HashMap<String, Instant>,
}

fn check_name(kind: &str, name: &str) -> Result<(), StoreError> {
    let bad = name.is_empty()
        || name.starts_with('.')
        || name.contains(['/', '\\', '\0'])
        || name.contains("..");
    if bad {
        return Err(StoreError::InvalidState {
            store: name.to_string(),
            message: format!(
                "'{name}' is not a valid {kind} name for a directory; use a non-empty name without '/', '\\' or leading '.'"
            ),
        });
    }
    Ok(())
}

impl StateDirectory {
    /// Creates `<state_dir>/<application_id>` if needed and locks it.
    ///
    /// Fails with [`StoreError::Locked`] when another `StateDirectory` (in
    /// any process) holds the lock.
    pub fn open(config: &StateConfig, application_id: &str) -> Result<Self, StoreError> {
        check_name("application id", application_id)?;
        let app_dir = config.state_dir.join(application_id);
        std::fs::create_dir_all(&app_dir).map_err(|e| StoreError::io(&app_dir, e))?;
        let lock_path = app_dir.join(LOCK_FILE);
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| StoreError::io(&lock_path, e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(StoreError::Locked { path: app_dir }),
            Err(TryLockError::Error(e)) => return Err(StoreError::io(&lock_path, e)),
        }
        Ok(StateDirectory {
            app_dir,
            _lock: lock,
            cleanup_delay: Duration::from_millis(config.cleanup_delay_ms),
            opened_at: Instant::now(),
            released: HashMap::new(),
        })
    }

    /// `<state_dir>/<application_id>`.
    pub fn path(&self) -> &Path {
        &self.app_dir
    }

    /// The directory of task `task_id`, created if needed. Claims the task:
    /// it is no longer subject to cleanup.
    pub fn task_dir(&mut self, task_id: &str) -> Result<PathBuf, StoreError> {
        check_name("task id", task_id)?;
        let dir = self.app_dir.join(task_id);
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        self.released.remove(task_id);
        Ok(dir)
    }

    /// The directory of store `store` of task `task_id`, created if needed.
    pub fn store_dir(&mut self, task_id: &str, store: &str) -> Result<PathBuf, StoreError> {
        check_name("store", store)?;
        let dir = self.task_dir(task_id)?.join(store);
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        Ok(dir)
    }

    /// Records that this instance stopped owning `task_id` now (its stores
    /// must be closed); its directory is removed `cleanup_delay_ms` later.
    pub fn release_task(&mut self, task_id: &str) {
        self.released.insert(task_id.to_string(), Instant::now());
    }

    /// Task directories present on disk, sorted.
    pub fn task_ids(&self) -> Result<Vec<String>, StoreError> {
        let mut ids = Vec::new();
        let entries =
            std::fs::read_dir(&self.app_dir).map_err(|e| StoreError::io(&self.app_dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io(&self.app_dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if is_dir && !name.starts_with('.') {
                ids.push(name);
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Removes the directories of tasks not in `owned` that have been
    /// unowned for at least `cleanup_delay_ms`; returns the removed task ids.
    /// The caller must have closed the stores of those tasks.
    pub fn clean_unowned(&mut self, owned: &[&str]) -> Result<Vec<String>, StoreError> {
        let now = Instant::now();
        let mut removed = Vec::new();
        for id in self.task_ids()? {
            if owned.contains(&id.as_str()) {
                continue;
            }
            let since = *self.released.get(&id).unwrap_or(&self.opened_at);
            if now.duration_since(since) >= self.cleanup_delay {
                let dir = self.app_dir.join(&id);
                std::fs::remove_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
                self.released.remove(&id);
                removed.push(id);
            }
        }
        Ok(removed)
    }
}
