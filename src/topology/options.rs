//! Per-operation options: serdes, names, extractors, partitioners.
//!
//! Every option left unset falls back: serdes to those known upstream (for
//! operations that keep the type), then to the builder's
//! [`crate::serdes::SerdeRegistry`]; names to generated ones.

use std::sync::Arc;

use crate::serdes::{Serde, SharedSerde};
use crate::time::TimestampExtractor;

use super::StreamPartitioner;

/// How a source reads its topic (Kafka Streams' `Consumed`).
pub struct Consumed<K, V> {
    pub(crate) key_serde: Option<SharedSerde<K>>,
    pub(crate) value_serde: Option<SharedSerde<V>>,
    pub(crate) extractor: Option<Arc<dyn TimestampExtractor<K, V>>>,
    pub(crate) name: Option<String>,
}

impl<K, V> Default for Consumed<K, V> {
    fn default() -> Self {
        Consumed {
            key_serde: None,
            value_serde: None,
            extractor: None,
            name: None,
        }
    }
}

impl<K: 'static, V: 'static> Consumed<K, V> {
    /// Default serdes (by type) and the record timestamp.
    pub fn new() -> Self {
        Self::default()
    }

    /// With these key and value serdes.
    pub fn with(key: impl Serde<K>, value: impl Serde<V>) -> Self {
        Self::new().with_key_serde(key).with_value_serde(value)
    }

    /// With this key serde.
    pub fn with_key_serde(mut self, serde: impl Serde<K>) -> Self {
        self.key_serde = Some(Arc::new(serde));
        self
    }

    /// With this value serde.
    pub fn with_value_serde(mut self, serde: impl Serde<V>) -> Self {
        self.value_serde = Some(Arc::new(serde));
        self
    }

    /// With this timestamp extractor (default: [`crate::time::RecordTimestamp`]).
    pub fn with_timestamp_extractor(mut self, extractor: impl TimestampExtractor<K, V>) -> Self {
        self.extractor = Some(Arc::new(extractor));
        self
    }

    /// Names the source node.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// How a sink writes its topic (Kafka Streams' `Produced`).
pub struct Produced<K, V> {
    pub(crate) key_serde: Option<SharedSerde<K>>,
    pub(crate) value_serde: Option<SharedSerde<V>>,
    pub(crate) partitioner: Option<Arc<dyn StreamPartitioner<K, V>>>,
    pub(crate) name: Option<String>,
}

impl<K, V> Default for Produced<K, V> {
    fn default() -> Self {
        Produced {
            key_serde: None,
            value_serde: None,
            partitioner: None,
            name: None,
        }
    }
}

impl<K: 'static, V: 'static> Produced<K, V> {
    /// Serdes from upstream or defaults; the producer's key-hash partitioner.
    pub fn new() -> Self {
        Self::default()
    }

    /// With these key and value serdes.
    pub fn with(key: impl Serde<K>, value: impl Serde<V>) -> Self {
        Self::new().with_key_serde(key).with_value_serde(value)
    }

    /// With this key serde.
    pub fn with_key_serde(mut self, serde: impl Serde<K>) -> Self {
        self.key_serde = Some(Arc::new(serde));
        self
    }

    /// With this value serde.
    pub fn with_value_serde(mut self, serde: impl Serde<V>) -> Self {
        self.value_serde = Some(Arc::new(serde));
        self
    }

    /// With a custom partitioner.
    pub fn with_partitioner(mut self, partitioner: impl StreamPartitioner<K, V>) -> Self {
        self.partitioner = Some(Arc::new(partitioner));
        self
    }

    /// Names the sink node.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// How a table or aggregation is stored (Kafka Streams' `Materialized`).
pub struct Materialized<K, V> {
    pub(crate) store_name: Option<String>,
    pub(crate) key_serde: Option<SharedSerde<K>>,
    pub(crate) value_serde: Option<SharedSerde<V>>,
    pub(crate) logging: bool,
    pub(crate) retention_ms: Option<i64>,
}

impl<K, V> Default for Materialized<K, V> {
    fn default() -> Self {
        Materialized {
            store_name: None,
            key_serde: None,
            value_serde: None,
            logging: true,
            retention_ms: None,
        }
    }
}

impl<K: 'static, V: 'static> Materialized<K, V> {
    /// A store with a generated name, logged.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store named `store_name` (queryable, and its changelog is
    /// `<application_id>-<store_name>-changelog`).
    pub fn as_(store_name: impl Into<String>) -> Self {
        Materialized {
            store_name: Some(store_name.into()),
            ..Self::default()
        }
    }

    /// With this key serde.
    pub fn with_key_serde(mut self, serde: impl Serde<K>) -> Self {
        self.key_serde = Some(Arc::new(serde));
        self
    }

    /// With this value serde.
    pub fn with_value_serde(mut self, serde: impl Serde<V>) -> Self {
        self.value_serde = Some(Arc::new(serde));
        self
    }

    /// Without a changelog: the store is not fault tolerant.
    pub fn with_logging_disabled(mut self) -> Self {
        self.logging = false;
        self
    }

    /// For window and session stores: keep windows this long (default:
    /// window size + grace, the least possible; a longer retention keeps
    /// closed windows queryable). Must be at least size + grace, checked
    /// when the topology is built.
    pub fn with_retention(mut self, retention: std::time::Duration) -> Self {
        self.retention_ms = Some(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        self
    }
}

/// How a grouping (and its repartition topic) is named and serialized
/// (Kafka Streams' `Grouped`).
pub struct Grouped<K, V> {
    pub(crate) name: Option<String>,
    pub(crate) key_serde: Option<SharedSerde<K>>,
    pub(crate) value_serde: Option<SharedSerde<V>>,
}

/// Options of [`super::KStream::repartition`]: the same as a grouping's.
pub type Repartitioned<K, V> = Grouped<K, V>;

impl<K, V> Default for Grouped<K, V> {
    fn default() -> Self {
        Grouped {
            name: None,
            key_serde: None,
            value_serde: None,
        }
    }
}

impl<K: 'static, V: 'static> Grouped<K, V> {
    /// Generated names, serdes from upstream or defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names the grouping: the repartition topic becomes `<name>-repartition`.
    pub fn as_(name: impl Into<String>) -> Self {
        Grouped {
            name: Some(name.into()),
            ..Self::default()
        }
    }

    /// With these key and value serdes.
    pub fn with(key: impl Serde<K>, value: impl Serde<V>) -> Self {
        Self::new().with_key_serde(key).with_value_serde(value)
    }

    /// With this key serde.
    pub fn with_key_serde(mut self, serde: impl Serde<K>) -> Self {
        self.key_serde = Some(Arc::new(serde));
        self
    }

    /// With this value serde.
    pub fn with_value_serde(mut self, serde: impl Serde<V>) -> Self {
        self.value_serde = Some(Arc::new(serde));
        self
    }
}
