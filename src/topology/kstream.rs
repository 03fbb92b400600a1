//! [`KStream`]: an unbounded stream of records, and its stateless operations.
//!
//! Every operation adds one node below this stream's node and returns a handle
//! to it; the same stream may be used several times (each use is a child, and
//! records are cloned to all children). Operations that change the key mark
//! the result *repartition required* (see [`super`]); grouping such a stream
//! inserts a repartition topic.

use std::sync::Arc;

use crate::processor::node::{ProcessorNode, fn_node};
use crate::processor::{Processor, ProcessorContext, Record};
use crate::serdes::{Serde, SharedSerde};

use super::internal::Shared;
use super::{Data, Produced, Repartitioned, TopicName, TopologyError};

/// A stream of typed records (Kafka Streams' `KStream<K, V>`).
pub struct KStream<K, V> {
    pub(crate) builder: Shared,
    pub(crate) node: usize,
    pub(crate) key_serde: Option<SharedSerde<K>>,
    pub(crate) value_serde: Option<SharedSerde<V>>,
    pub(crate) repartition_required: bool,
    pub(crate) name: Option<String>,
}

impl<K, V> Clone for KStream<K, V> {
    fn clone(&self) -> Self {
        KStream {
            builder: self.builder.clone(),
            node: self.node,
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone(),
            repartition_required: self.repartition_required,
            name: self.name.clone(),
        }
    }
}

impl<K: Data, V: Data> KStream<K, V> {
    pub(crate) fn new(
        builder: Shared,
        node: usize,
        key_serde: Option<SharedSerde<K>>,
        value_serde: Option<SharedSerde<V>>,
        repartition_required: bool,
    ) -> Self {
        KStream {
            builder,
            node,
            key_serde,
            value_serde,
            repartition_required,
            name: None,
        }
    }

    fn derive<K2: Data, V2: Data>(
        &self,
        node: usize,
        key_serde: Option<SharedSerde<K2>>,
        value_serde: Option<SharedSerde<V2>>,
        key_changed: bool,
    ) -> KStream<K2, V2> {
        KStream::new(
            self.builder.clone(),
            node,
            key_serde,
            value_serde,
            self.repartition_required || key_changed,
        )
    }

    /// Adds a processor node `prefix…` built by `make`.
    fn add(
        &self,
        prefix: &str,
        make: impl Fn() -> Box<dyn crate::processor::node::ErasedNode> + Send + Sync + 'static,
    ) -> usize {
        let mut b = self.builder.borrow_mut();
        let name = b.name_or(self.name.clone(), prefix);
        b.add_processor(name, &[self.node], make)
    }

    /// Names the node the next operation adds (instead of a generated name).
    pub fn named(&self, name: impl Into<String>) -> Self {
        let mut s = self.clone();
        s.name = Some(name.into());
        s
    }

    /// The same stream with `key` and `value` as its serdes: what later
    /// operations (a repartition, a join's stores, a sink) use where none is
    /// given. Operations that change keys or values (`map`, `process` …)
    /// drop the serdes they cannot know; this sets them again. Adds no node.
    pub fn with_serdes(&self, key: impl Serde<K>, value: impl Serde<V>) -> KStream<K, V> {
        let mut s = self.clone();
        s.key_serde = Some(Arc::new(key));
        s.value_serde = Some(Arc::new(value));
        s
    }

    /// Keeps the records for which `predicate` holds.
    pub fn filter(
        &self,
        predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
    ) -> KStream<K, V> {
        let predicate = Arc::new(predicate);
        let node = self.add("KSTREAM-FILTER-", move || {
            let p = predicate.clone();
            fn_node(move |ctx: &ProcessorContext<'_, K, V>, r: Record<K, V>| {
                if p(&r.key, &r.value) {
                    ctx.forward(r)
                } else {
                    Ok(())
                }
            })
        });
        self.derive(
            node,
            self.key_serde.clone(),
            self.value_serde.clone(),
            false,
        )
    }

    /// Drops the records for which `predicate` holds.
    pub fn filter_not(
        &self,
        predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
    ) -> KStream<K, V> {
        self.filter(move |k, v| !predicate(k, v))
    }

    /// Replaces key and value (marks the stream for repartitioning).
    pub fn map<K2: Data, V2: Data>(
        &self,
        mapper: impl Fn(K, V) -> (K2, V2) + Send + Sync + 'static,
    ) -> KStream<K2, V2> {
        let mapper = Arc::new(mapper);
        let node = self.add("KSTREAM-MAP-", move || {
            let m = mapper.clone();
            fn_node(move |ctx: &ProcessorContext<'_, K2, V2>, r: Record<K, V>| {
                let (k, v) = m(r.key, r.value);
                ctx.forward(Record {
                    key: k,
                    value: v,
                    timestamp: r.timestamp,
                    headers: r.headers,
                })
            })
        });
        self.derive(node, None, None, true)
    }

    /// Replaces the value; the key (and partitioning) stays.
    pub fn map_values<V2: Data>(
        &self,
        mapper: impl Fn(V) -> V2 + Send + Sync + 'static,
    ) -> KStream<K, V2> {
        let mapper = Arc::new(mapper);
        let node = self.add("KSTREAM-MAPVALUES-", move || {
            let m = mapper.clone();
            fn_node(move |ctx: &ProcessorContext<'_, K, V2>, r: Record<K, V>| {
                let value = m(r.value);
                ctx.forward(Record {
                    key: r.key,
                    value,
                    timestamp: r.timestamp,
                    headers: r.headers,
                })
            })
        });
        self.derive(node, self.key_serde.clone(), None, false)
    }

    /// Replaces each record by zero or more records (marks for repartitioning).
    pub fn flat_map<K2: Data, V2: Data, I>(
        &self,
        mapper: impl Fn(K, V) -> I + Send + Sync + 'static,
    ) -> KStream<K2, V2>
    where
        I: IntoIterator<Item = (K2, V2)>,
    {
        let mapper = Arc::new(mapper);
        let node = self.add("KSTREAM-FLATMAP-", move || {
            let m = mapper.clone();
            fn_node(move |ctx: &ProcessorContext<'_, K2, V2>, r: Record<K, V>| {
                for (key, value) in m(r.key, r.value) {
                    ctx.forward(Record {
                        key,
                        value,
                        timestamp: r.timestamp,
                        headers: r.headers.clone(),
                    })?;
                }
                Ok(())
            })
        });
        self.derive(node, None, None, true)
    }

    /// Replaces each value by zero or more values under the same key.
    pub fn flat_map_values<V2: Data, I>(
        &self,
        mapper: impl Fn(V) -> I + Send + Sync + 'static,
    ) -> KStream<K, V2>
    where
        I: IntoIterator<Item = V2>,
    {
        let mapper = Arc::new(mapper);
        let node = self.add("KSTREAM-FLATMAPVALUES-", move || {
            let m = mapper.clone();
            fn_node(move |ctx: &ProcessorContext<'_, K, V2>, r: Record<K, V>| {
                for value in m(r.value) {
                    ctx.forward(Record {
                        key: r.key.clone(),
                        value,
                        timestamp: r.timestamp,
                        headers: r.headers.clone(),
                    })?;
                }
                Ok(())
            })
        });
        self.derive(node, self.key_serde.clone(), None, false)
    }

    /// Sets a new key computed from key and value (marks for repartitioning).
    pub fn select_key<K2: Data>(
        &self,
        selector: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
    ) -> KStream<K2, V> {
        let selector = Arc::new(selector);
        let node = self.add("KSTREAM-KEY-SELECT-", move || {
            let s = selector.clone();
            fn_node(move |ctx: &ProcessorContext<'_, K2, V>, r: Record<K, V>| {
                let key = s(&r.key, &r.value);
                ctx.forward(r.with_key(key))
            })
        });
        self.derive(node, None, self.value_serde.clone(), true)
    }

    /// Calls `action` on each record and passes it on unchanged.
    pub fn peek(&self, action: impl Fn(&K, &V) + Send + Sync + 'static) -> KStream<K, V> {
        let action = Arc::new(action);
        let node = self.add("KSTREAM-PEEK-", move || {
            let a = action.clone();
            fn_node(move |ctx: &ProcessorContext<'_, K, V>, r: Record<K, V>| {
                a(&r.key, &r.value);
                ctx.forward(r)
            })
        });
        self.derive(
            node,
            self.key_serde.clone(),
            self.value_serde.clone(),
            false,
        )
    }

    /// Calls `action` on each record (a terminal operation).
    pub fn foreach(&self, action: impl Fn(&K, &V) + Send + Sync + 'static) {
        let action = Arc::new(action);
        self.add("KSTREAM-FOREACH-", move || {
            let a = action.clone();
            fn_node(move |_: &ProcessorContext<'_, (), ()>, r: Record<K, V>| {
                a(&r.key, &r.value);
                Ok(())
            })
        });
    }

    /// The records of both streams, interleaved in processing order.
    pub fn merge(&self, other: &KStream<K, V>) -> KStream<K, V> {
        let mut b = self.builder.borrow_mut();
        let name = b.name_or(self.name.clone(), "KSTREAM-MERGE-");
        let node = b.add_processor(name, &[self.node, other.node], || {
            fn_node(|ctx: &ProcessorContext<'_, K, V>, r: Record<K, V>| ctx.forward(r))
        });
        drop(b);
        let mut merged = self.derive(
            node,
            self.key_serde.clone(),
            self.value_serde.clone(),
            false,
        );
        merged.repartition_required |= other.repartition_required;
        merged
    }

    /// Writes the records to `topic`.
    pub fn to(&self, topic: &str, produced: Produced<K, V>) {
        let mut b = self.builder.borrow_mut();
        let name = b.name_or(produced.name.or_else(|| self.name.clone()), "KSTREAM-SINK-");
        let key = b.serde(produced.key_serde, self.key_serde.clone(), &name, "key");
        let value = b.serde(
            produced.value_serde,
            self.value_serde.clone(),
            &name,
            "value",
        );
        b.add_sink(
            name,
            self.node,
            TopicName::User(topic.to_owned()),
            key,
            value,
            produced.partitioner,
        );
    }

    /// Runs a [`Processor`] made by `supplier` (one instance per task) with
    /// access to the named `stores` (added with
    /// [`super::StreamsBuilder::add_key_value_store`]). The result is the stream
    /// of the records it forwards.
    pub fn process<K2: Data, V2: Data, P>(
        &self,
        supplier: impl Fn() -> P + Send + Sync + 'static,
        stores: &[&str],
    ) -> KStream<K2, V2>
    where
        P: Processor<K, V, K2, V2>,
    {
        let node = self.add("KSTREAM-PROCESSOR-", move || {
            ProcessorNode::<P, K, V, K2, V2>::boxed(supplier())
        });
        let mut b = self.builder.borrow_mut();
        for &store in stores {
            match b.store_index(store) {
                Some(s) => b.connect_store(node, s),
                None => {
                    let processor = b.nodes[node].name.clone();
                    b.error(TopologyError::UnknownStore {
                        processor,
                        store: store.to_owned(),
                    });
                }
            }
        }
        drop(b);
        self.derive(node, None, None, true)
    }

    /// Like [`KStream::process`] for a processor that keeps every record's
    /// key (Kafka Streams' `processValues`): the stream keeps its key serde
    /// and is not marked for repartitioning, so a `group_by_key` after it
    /// needs no repartition topic. A processor that forwards another key
    /// breaks the co-partitioning the caller relies on.
    pub fn process_values<V2: Data, P>(
        &self,
        supplier: impl Fn() -> P + Send + Sync + 'static,
        stores: &[&str],
    ) -> KStream<K, V2>
    where
        P: Processor<K, V, K, V2>,
    {
        let mut s = self.process::<K, V2, P>(supplier, stores);
        s.key_serde = self.key_serde.clone();
        s.repartition_required = self.repartition_required;
        s
    }

    /// Sends the records through a repartition topic now (so downstream
    /// stateful operations see every record of a key in one task).
    pub fn repartition(&self, options: Repartitioned<K, V>) -> KStream<K, V> {
        let mut b = self.builder.borrow_mut();
        let base = b.name_or(
            options.name.or_else(|| self.name.clone()),
            "KSTREAM-REPARTITION-",
        );
        let key = b.serde(options.key_serde, self.key_serde.clone(), &base, "key");
        let value = b.serde(
            options.value_serde,
            self.value_serde.clone(),
            &base,
            "value",
        );
        let source = b.add_repartition(self.node, &base, key.clone(), value.clone());
        drop(b);
        KStream::new(self.builder.clone(), source, Some(key), Some(value), false)
    }
}
