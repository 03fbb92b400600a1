//! Reading the tasks' stores from a test: typed lookups by store name.

use crate::processor::TaskInstance;
use crate::serdes::SerdeError;
use crate::state::StoreError;

use super::{DriverError, TopologyTestDriver};

impl TopologyTestDriver {
    fn task_with_store(&self, store: &str) -> Result<&TaskInstance, DriverError> {
        self.tasks
            .iter()
            .find(|t| t.store_serdes(store).is_some())
            .ok_or_else(|| DriverError::Store(StoreError::UnknownStore(store.to_owned())))
    }

    /// The value of `key` in key-value store `store` (committed and open writes).
    pub fn key_value_store_get<K: 'static, V: 'static>(
        &self,
        store: &str,
        key: &K,
    ) -> Result<Option<V>, DriverError> {
        let task = self.task_with_store(store)?;
        let (ks, vs) = typed::<K, V>(task, store)?;
        let mut buf = Vec::new();
        ks.serialize(store, key, &mut buf)
            .map_err(|source| DriverError::Serde {
                topic: store.to_owned(),
                source,
            })?;
        let bytes = task
            .read_store(store, |s| s.get(&buf))
            .expect("task has the store")?;
        bytes
            .map(|b| vs.deserialize(store, &b))
            .transpose()
            .map_err(|source| DriverError::Serde {
                topic: store.to_owned(),
                source,
            })
    }

    /// All entries of key-value store `store`, in key-byte order.
    pub fn key_value_store_all<K: 'static, V: 'static>(
        &self,
        store: &str,
    ) -> Result<Vec<(K, V)>, DriverError> {
        let task = self.task_with_store(store)?;
        let (ks, vs) = typed::<K, V>(task, store)?;
        let entries = task
            .read_store(store, |s| {
                s.all().and_then(|it| it.collect::<Result<Vec<_>, _>>())
            })
            .expect("task has the store")?;
        entries
            .into_iter()
            .map(|(k, v)| Ok((ks.deserialize(store, &k)?, vs.deserialize(store, &v)?)))
            .collect::<Result<Vec<_>, SerdeError>>()
            .map_err(|source| DriverError::Serde {
                topic: store.to_owned(),
                source,
            })
    }

    /// The value of `key`'s window starting at `start_ms` in window store
    /// `store`; `None` if absent or expired.
    pub fn window_store_fetch<K: 'static, V: 'static>(
        &self,
        store: &str,
        key: &K,
        start_ms: i64,
    ) -> Result<Option<V>, DriverError> {
        let task = self.task_with_store(store)?;
        let (ks, vs) = typed::<K, V>(task, store)?;
        let serde_error = |source| DriverError::Serde {
            topic: store.to_owned(),
            source,
        };
        let mut buf = Vec::new();
        ks.serialize(store, key, &mut buf).map_err(serde_error)?;
        let bytes = task
            .read_window_store(store, |s| s.fetch(&buf, start_ms))
            .ok_or_else(|| DriverError::Store(StoreError::UnknownStore(store.to_owned())))??;
        bytes
            .map(|b| vs.deserialize(store, &b))
            .transpose()
            .map_err(serde_error)
    }
}

fn typed<'t, K: 'static, V: 'static>(
    task: &'t TaskInstance,
    store: &str,
) -> Result<
    (
        &'t dyn crate::serdes::Serde<K>,
        &'t dyn crate::serdes::Serde<V>,
    ),
    DriverError,
> {
    let serdes = task
        .store_serdes(store)
        .expect("checked by task_with_store");
    serdes.typed::<K, V>(store).map_err(DriverError::StoreType)
}
