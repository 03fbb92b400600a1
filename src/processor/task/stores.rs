//! Store access of a task outside processing: restoring changelog records
//! and the committed stream time before `initialize`, and reading stores for
//! interactive queries, the runtime's restore and the test driver.

use crate::state::{ChangelogRecord, KeyValueStore, SessionStore, StoreError, WindowStore};

use super::super::store::{AnyStore, StoreSerdes, StoreSlot};
use super::{TaskError, TaskInstance, TaskState};

impl TaskInstance {
    /// Writes a restored changelog record into store `store` without logging
    /// it (`value == None` deletes). Only before `initialize`.
    pub fn restore(
        &mut self,
        store: &str,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), TaskError> {
        let mut cell = self.restorable_store(store)?.inner.borrow_mut();
        cell.store
            .restore(key, value)
            .map_err(|source| TaskError::Store {
                task: self.id,
                source,
            })
    }

    /// Writes a batch of changelog records into store `store` as committed
    /// state, together with `changelog_offset` (the offset of the last one),
    /// in one write ([`crate::state::StateStore::restore_batch`]). Only
    /// before `initialize`.
    pub fn restore_batch(
        &mut self,
        store: &str,
        records: &[ChangelogRecord<'_>],
        changelog_offset: i64,
    ) -> Result<(), TaskError> {
        let mut cell = self.restorable_store(store)?.inner.borrow_mut();
        cell.store
            .state_mut()
            .restore_batch(records, changelog_offset)
            .map_err(|source| TaskError::Store {
                task: self.id,
                source,
            })
    }

    /// Store `store`, when the task may still restore (before `initialize`).
    fn restorable_store(&self, store: &str) -> Result<&StoreSlot, TaskError> {
        self.require(TaskState::Created, "restore")?;
        self.store_slot(store).ok_or_else(|| TaskError::Store {
            task: self.id,
            source: StoreError::UnknownStore(store.to_owned()),
        })
    }

    /// Restores the stream time the task had at its last commit (the
    /// runtime keeps it in the committed offsets' metadata, see
    /// [`crate::runtime::stream_time`]). Stream time never goes backwards:
    /// the larger of the current and the given value is kept. Only before
    /// `initialize`.
    pub fn restore_stream_time(&mut self, stream_time: i64) -> Result<(), TaskError> {
        self.require(TaskState::Created, "restore stream time")?;
        self.stream_time = self.stream_time.max(stream_time);
        Ok(())
    }

    fn store_slot(&self, name: &str) -> Option<&StoreSlot> {
        self.stores.iter().find(|s| s.name == name)
    }

    /// Runs `read` on the byte-level key-value store `name` (for interactive
    /// queries and tests); `None` if this task has no key-value store `name`.
    pub fn read_store<R>(
        &self,
        name: &str,
        read: impl FnOnce(&dyn KeyValueStore) -> R,
    ) -> Option<R> {
        let slot = self.store_slot(name)?;
        let cell = slot.inner.borrow();
        match &cell.store {
            AnyStore::KeyValue(s) => Some(read(s.as_ref())),
            _ => None,
        }
    }

    /// Runs `read` on the byte-level window store `name`; `None` if this task
    /// has no window store `name`.
    pub fn read_window_store<R>(
        &self,
        name: &str,
        read: impl FnOnce(&dyn WindowStore) -> R,
    ) -> Option<R> {
        let slot = self.store_slot(name)?;
        let cell = slot.inner.borrow();
        match &cell.store {
            AnyStore::Window(s) => Some(read(s.as_ref())),
            _ => None,
        }
    }

    /// Runs `read` on the byte-level session store `name`; `None` if this
    /// task has no session store `name`.
    pub fn read_session_store<R>(
        &self,
        name: &str,
        read: impl FnOnce(&dyn SessionStore) -> R,
    ) -> Option<R> {
        let slot = self.store_slot(name)?;
        let cell = slot.inner.borrow();
        match &cell.store {
            AnyStore::Session(s) => Some(read(s.as_ref())),
            _ => None,
        }
    }

    /// The changelog offset store `name` committed last (of any kind);
    /// `None` if there is no such store or it never committed one.
    pub fn store_committed_offset(&self, name: &str) -> Option<i64> {
        let slot = self.store_slot(name)?;
        let cell = slot.inner.borrow();
        cell.store.state().committed_offset()
    }

    pub(crate) fn store_serdes(&self, name: &str) -> Option<&StoreSerdes> {
        self.store_slot(name).map(|s| &s.serdes)
    }
}
