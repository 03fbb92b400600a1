//! [`KTable`]: a changelog stream interpreted as the latest value per key.
//!
//! Table nodes forward [`Change`]s (new and old value) so downstream
//! operations can tell updates from inserts and deletes. A source table
//! (`StreamsBuilder::table`) and `KStream::to_table` materialize every update
//! in a key-value store (logged); `filter` and `map_values` compute on the
//! change without a store of their own.

use std::sync::Arc;

use crate::processor::node::{ErasedNode, fn_node};
use crate::processor::{Change, ProcessorContext, ProcessorError, Record, StoreSerdes};
use crate::serdes::{OptionSerde, SharedSerde};
use crate::time::TimestampExtractor;

use super::internal::Shared;
use super::{Consumed, Data, KStream, Materialized, TopicName};

/// A table of the latest value per key (Kafka Streams' `KTable<K, V>`).
pub struct KTable<K, V> {
    pub(crate) builder: Shared,
    pub(crate) node: usize,
    pub(crate) key_serde: Option<SharedSerde<K>>,
    pub(crate) value_serde: Option<SharedSerde<V>>,
    pub(crate) store_name: Option<String>,
    pub(crate) name: Option<String>,
}

impl<K, V> Clone for KTable<K, V> {
    fn clone(&self) -> Self {
        KTable {
            builder: self.builder.clone(),
            node: self.node,
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone(),
            store_name: self.store_name.clone(),
            name: self.name.clone(),
        }
    }
}

/// Stores the new value (deletes on `None`) and forwards the change.
fn upsert<K: Data, V: Data>(
    ctx: &ProcessorContext<'_, K, Change<V>>,
    store: &str,
    r: Record<K, Option<V>>,
) -> Result<(), ProcessorError> {
    let kv = ctx.key_value_store::<K, V>(store)?;
    let old = kv.get(&r.key)?;
    match &r.value {
        Some(v) => kv.put(&r.key, v)?,
        None if old.is_some() => {
            kv.delete(&r.key)?;
        }
        None => return Ok(()),
    }
    ctx.forward(Record {
        key: r.key,
        value: Change { new: r.value, old },
        timestamp: r.timestamp,
        headers: r.headers,
    })
}

/// Node factory for table sources: nullable values, `None` deletes.
fn table_upsert_factory<K: Data, V: Data>(
    store: String,
) -> impl Fn() -> Box<dyn ErasedNode> + Send + Sync + 'static {
    move || {
        let store = store.clone();
        fn_node(
            move |ctx: &ProcessorContext<'_, K, Change<V>>, r: Record<K, Option<V>>| {
                upsert(ctx, &store, r)
            },
        )
    }
}

/// Node factory for `KStream::to_table`: every record is an upsert.
pub(crate) fn stream_upsert_factory<K: Data, V: Data>(
    store: String,
) -> impl Fn() -> Box<dyn ErasedNode> + Send + Sync + 'static {
    move || {
        let store = store.clone();
        fn_node(
            move |ctx: &ProcessorContext<'_, K, Change<V>>, r: Record<K, V>| {
                let r = Record {
                    key: r.key,
                    value: Some(r.value),
                    timestamp: r.timestamp,
                    headers: r.headers,
                };
                upsert(ctx, &store, r)
            },
        )
    }
}

/// `StreamsBuilder::table`: source (nullable values) → KTABLE-SOURCE (store).
pub(crate) fn table_source<K: Data, V: Data>(
    builder: &Shared,
    topic: &str,
    consumed: Consumed<K, V>,
    materialized: Materialized<K, V>,
) -> KTable<K, V> {
    let mut b = builder.borrow_mut();
    let source_name = b.name_or(consumed.name, "KSTREAM-SOURCE-");
    let store_name = b.name_or(materialized.store_name, &format!("{topic}-STATE-STORE-"));
    let table_name = b.generate("KTABLE-SOURCE-");
    let key = b.serde(
        consumed.key_serde.or(materialized.key_serde),
        None,
        &source_name,
        "key",
    );
    let value = b.serde(
        consumed.value_serde.or(materialized.value_serde),
        None,
        &source_name,
        "value",
    );
    let nullable: SharedSerde<Option<V>> = Arc::new(OptionSerde::from_shared(value.clone()));
    let extractor: Arc<dyn TimestampExtractor<K, Option<V>>> = match consumed.extractor {
        Some(inner) => Arc::new(SomeValue(inner)),
        None => Arc::new(crate::time::RecordTimestamp),
    };
    let source = b.add_source(
        source_name,
        vec![TopicName::User(topic.to_owned())],
        key.clone(),
        nullable,
        extractor,
    );
    let store = b.add_store(
        store_name.clone(),
        materialized.logging,
        StoreSerdes::new(key.clone(), value.clone()),
    );
    let node = b.add_processor(
        table_name,
        &[source],
        table_upsert_factory::<K, V>(store_name.clone()),
    );
    b.connect_store(node, store);
    drop(b);
    KTable::new(
        builder.clone(),
        node,
        Some(key),
        Some(value),
        Some(store_name),
    )
}

/// Applies a value extractor to table records; tombstones keep the record timestamp.
struct SomeValue<K, V>(Arc<dyn TimestampExtractor<K, V>>);

impl<K: 'static, V: 'static> TimestampExtractor<K, Option<V>> for SomeValue<K, V> {
    fn extract(&self, key: &K, value: &Option<V>, record_timestamp: i64, stream_time: i64) -> i64 {
        match value {
            Some(v) => self.0.extract(key, v, record_timestamp, stream_time),
            None => record_timestamp,
        }
    }
}

impl<K: Data, V: Data> KTable<K, V> {
    pub(crate) fn new(
        builder: Shared,
        node: usize,
        key_serde: Option<SharedSerde<K>>,
        value_serde: Option<SharedSerde<V>>,
        store_name: Option<String>,
    ) -> Self {
        KTable {
            builder,
            node,
            key_serde,
            value_serde,
            store_name,
            name: None,
        }
    }

    /// The name of the store holding this table, when it is materialized
    /// (readable in the test driver and, later, by interactive queries).
    pub fn store_name(&self) -> Option<&str> {
        self.store_name.as_deref()
    }

    /// Names the node the next operation adds.
    pub fn named(&self, name: impl Into<String>) -> Self {
        let mut t = self.clone();
        t.name = Some(name.into());
        t
    }

    fn add(
        &self,
        prefix: &str,
        make: impl Fn() -> Box<dyn ErasedNode> + Send + Sync + 'static,
    ) -> usize {
        let mut b = self.builder.borrow_mut();
        let name = b.name_or(self.name.clone(), prefix);
        b.add_processor(name, &[self.node], make)
    }

    /// Keeps rows for which `predicate` holds; a row that stops matching is
    /// deleted downstream.
    pub fn filter(
        &self,
        predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
    ) -> KTable<K, V> {
        let predicate = Arc::new(predicate);
        let node = self.add("KTABLE-FILTER-", move || {
            let p = predicate.clone();
            fn_node(
                move |ctx: &ProcessorContext<'_, K, Change<V>>, r: Record<K, Change<V>>| {
                    let key = &r.key;
                    let keep = |v: Option<V>| v.filter(|v| p(key, v));
                    let change = Change {
                        new: keep(r.value.new),
                        old: keep(r.value.old),
                    };
                    if change.new.is_none() && change.old.is_none() {
                        return Ok(());
                    }
                    ctx.forward(Record {
                        key: r.key,
                        value: change,
                        timestamp: r.timestamp,
                        headers: r.headers,
                    })
                },
            )
        });
        KTable::new(
            self.builder.clone(),
            node,
            self.key_serde.clone(),
            self.value_serde.clone(),
            None,
        )
    }

    /// Maps every row's value.
    pub fn map_values<V2: Data>(
        &self,
        mapper: impl Fn(V) -> V2 + Send + Sync + 'static,
    ) -> KTable<K, V2> {
        let mapper = Arc::new(mapper);
        let node = self.add("KTABLE-MAPVALUES-", move || {
            let m = mapper.clone();
            fn_node(
                move |ctx: &ProcessorContext<'_, K, Change<V2>>, r: Record<K, Change<V>>| {
                    let value = Change {
                        new: r.value.new.map(|v| m(v)),
                        old: r.value.old.map(|v| m(v)),
                    };
                    ctx.forward(Record {
                        key: r.key,
                        value,
                        timestamp: r.timestamp,
                        headers: r.headers,
                    })
                },
            )
        });
        KTable::new(
            self.builder.clone(),
            node,
            self.key_serde.clone(),
            None,
            None,
        )
    }

    /// The stream of updates: each new value, `None` for a deletion (a
    /// tombstone when written to a topic).
    pub fn to_stream(&self) -> KStream<K, Option<V>> {
        let node = self.add("KTABLE-TOSTREAM-", || {
            fn_node(
                |ctx: &ProcessorContext<'_, K, Option<V>>, r: Record<K, Change<V>>| {
                    ctx.forward(Record {
                        key: r.key,
                        value: r.value.new,
                        timestamp: r.timestamp,
                        headers: r.headers,
                    })
                },
            )
        });
        let value_serde = self
            .value_serde
            .clone()
            .map(|s| Arc::new(OptionSerde::from_shared(s)) as SharedSerde<Option<V>>);
        KStream::new(
            self.builder.clone(),
            node,
            self.key_serde.clone(),
            value_serde,
            false,
        )
    }
}

impl<K: Data, V: Data> KStream<K, V> {
    /// Interprets the stream as table updates (latest value per key), stored
    /// in a key-value store.
    pub fn to_table(&self, materialized: Materialized<K, V>) -> KTable<K, V> {
        let mut b = self.builder.borrow_mut();
        let name = b.name_or(self.name.clone(), "KSTREAM-TOTABLE-");
        let store_name = b.name_or(materialized.store_name, "KSTREAM-TOTABLE-STATE-STORE-");
        let key = b.serde(
            materialized.key_serde,
            self.key_serde.clone(),
            &store_name,
            "key",
        );
        let value = b.serde(
            materialized.value_serde,
            self.value_serde.clone(),
            &store_name,
            "value",
        );
        let store = b.add_store(
            store_name.clone(),
            materialized.logging,
            StoreSerdes::new(key.clone(), value.clone()),
        );
        let node = b.add_processor(
            name,
            &[self.node],
            super::ktable::stream_upsert_factory::<K, V>(store_name.clone()),
        );
        b.connect_store(node, store);
        drop(b);
        KTable::new(
            self.builder.clone(),
            node,
            Some(key),
            Some(value),
            Some(store_name),
        )
    }
}
