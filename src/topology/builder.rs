//! [`StreamsBuilder`]: the entry point of the DSL. It starts streams and
//! tables and [`StreamsBuilder::build`]s the [`Topology`]; the state it
//! shares with every handle is the topology under construction
//! (`internal.rs`).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::processor::StoreSerdes;
use crate::serdes::SerdeRegistry;
use crate::time::RecordTimestamp;

use super::internal::{BuilderInner, Shared};
use super::{Consumed, Data, KStream, KTable, Materialized, TopicName, Topology, TopologyError};

/// Builds a [`Topology`] with the DSL (Kafka Streams' `StreamsBuilder`).
///
/// ```
/// use weir::topology::{Consumed, Produced, StreamsBuilder};
/// let builder = StreamsBuilder::new();
/// builder
///     .stream::<String, i64>("readings", Consumed::new())
///     .filter(|_, v| *v >= 0)
///     .to("valid-readings", Produced::new());
/// let topology = builder.build().unwrap();
/// assert!(topology.describe().to_string().contains("KSTREAM-FILTER-0000000001"));
/// ```
pub struct StreamsBuilder {
    pub(crate) inner: Shared,
}

impl Default for StreamsBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamsBuilder {
    /// A builder with the standard default serdes ([`SerdeRegistry::standard`]).
    pub fn new() -> Self {
        Self::with_serdes(SerdeRegistry::standard())
    }

    /// A builder whose default serdes come from `serdes`.
    pub fn with_serdes(serdes: SerdeRegistry) -> Self {
        StreamsBuilder {
            inner: Rc::new(RefCell::new(BuilderInner::new(serdes))),
        }
    }

    /// A stream of the records of `topic`.
    pub fn stream<K: Data, V: Data>(&self, topic: &str, consumed: Consumed<K, V>) -> KStream<K, V> {
        let mut b = self.inner.borrow_mut();
        let name = b.name_or(consumed.name, "KSTREAM-SOURCE-");
        let key_serde = b.serde(consumed.key_serde, None, &name, "key");
        let value_serde = b.serde(consumed.value_serde, None, &name, "value");
        let extractor = consumed
            .extractor
            .unwrap_or_else(|| Arc::new(RecordTimestamp));
        let node = b.add_source(
            name,
            vec![TopicName::User(topic.to_owned())],
            key_serde.clone(),
            value_serde.clone(),
            extractor,
        );
        drop(b);
        KStream::new(
            self.inner.clone(),
            node,
            Some(key_serde),
            Some(value_serde),
            false,
        )
    }

    /// A table of the latest value per key of `topic` (null values delete),
    /// materialized in a store.
    pub fn table<K: Data, V: Data>(
        &self,
        topic: &str,
        consumed: Consumed<K, V>,
        materialized: Materialized<K, V>,
    ) -> KTable<K, V> {
        super::ktable::table_source(&self.inner, topic, consumed, materialized)
    }

    /// Adds a key-value store for processors added with [`KStream::process`].
    /// The store must be named (`Materialized::as_`).
    pub fn add_key_value_store<K: 'static, V: 'static>(
        &self,
        materialized: Materialized<K, V>,
    ) -> &Self {
        let mut b = self.inner.borrow_mut();
        let Some(name) = materialized.store_name else {
            b.error(TopologyError::UnnamedStore);
            return self;
        };
        let key = b.serde(materialized.key_serde, None, &name, "key");
        let value = b.serde(materialized.value_serde, None, &name, "value");
        b.add_store(name, materialized.logging, StoreSerdes::new(key, value));
        self
    }

    /// Finishes the topology: validates it and splits it into sub-topologies.
    pub fn build(&self) -> Result<Topology, TopologyError> {
        self.inner.borrow_mut().build()
    }
}
