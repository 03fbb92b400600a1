//! [`KGroupedStream`]: a stream grouped by key, ready for aggregation.
//!
//! `count`, `reduce` and `aggregate` add one aggregation node with a logged
//! key-value store holding the current aggregate per key. For every input
//! record the node computes the new aggregate from the current one; the
//! store write (which emits a changelog record) and the forwarded
//! `Change { new, old }` happen at once, or, with the record cache, once per
//! key per commit interval (see [`crate::processor::aggregate`]).
//!
//! If the grouped stream is *repartition required*, a repartition topic is
//! inserted before the aggregation node (see [`super`]).

use std::sync::Arc;

use crate::processor::ProcessorError;
use crate::processor::StoreSerdes;
use crate::processor::aggregate::{
    AggregateFn, AggregateNode, StepFailed, try_aggregate_fn, try_reduce_fn,
};
use crate::serdes::SharedSerde;

use super::internal::BuilderInner;
use super::{Data, Grouped, KStream, KTable, Materialized};

/// A grouped stream (Kafka Streams' `KGroupedStream<K, V>`).
pub struct KGroupedStream<K, V> {
    pub(crate) stream: KStream<K, V>,
    name: Option<String>,
    pub(crate) key_serde: Option<SharedSerde<K>>,
    pub(crate) value_serde: Option<SharedSerde<V>>,
}

impl<K, V> Clone for KGroupedStream<K, V> {
    fn clone(&self) -> Self {
        KGroupedStream {
            stream: self.stream.clone(),
            name: self.name.clone(),
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone(),
        }
    }
}

impl<K: Data, V: Data> KGroupedStream<K, V> {
    pub(crate) fn new(stream: KStream<K, V>, grouped: Grouped<K, V>) -> Self {
        KGroupedStream {
            key_serde: grouped.key_serde.or_else(|| stream.key_serde.clone()),
            value_serde: grouped.value_serde.or_else(|| stream.value_serde.clone()),
            name: grouped.name,
            stream,
        }
    }

    /// The node an aggregation with store `store_name` reads from: the
    /// stream's node, or a repartition topic's source inserted after it.
    pub(crate) fn aggregation_parent(
        &self,
        b: &mut BuilderInner,
        store_name: &str,
        key: &SharedSerde<K>,
    ) -> usize {
        if !self.stream.repartition_required {
            return self.stream.node;
        }
        let base = self.name.clone().unwrap_or_else(|| store_name.to_owned());
        let record_value = b.serde(self.value_serde.clone(), None, &base, "value");
        b.add_repartition(self.stream.node, &base, key.clone(), record_value)
    }

    /// Counts the records per key.
    pub fn count(&self, materialized: Materialized<K, i64>) -> KTable<K, i64>
    where
        K: Send,
    {
        self.aggregate_with(materialized, |_, _, old: Option<i64>| {
            Ok(old.unwrap_or(0) + 1)
        })
    }

    /// Combines the values per key with `reducer(aggregate, value)`; the first
    /// value of a key is its initial aggregate.
    pub fn reduce(
        &self,
        reducer: impl Fn(V, V) -> V + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<K, V>
    where
        K: Send,
        V: Send,
    {
        self.aggregate_with(materialized, move |_, value, old| {
            Ok(match old {
                Some(agg) => reducer(agg, value),
                None => value,
            })
        })
    }

    /// [`reduce`](Self::reduce) with a reducer that may fail:
    /// `reducer(&aggregate, value)`. A failure is a processing error of the
    /// record (the processing handler decides: fail, skip, dead-letter); the
    /// key's aggregate stays as it was.
    pub fn try_reduce(
        &self,
        reducer: impl Fn(&V, V) -> Result<V, ProcessorError> + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<K, V>
    where
        K: Send,
        V: Send,
    {
        self.aggregate_with(materialized, try_reduce_fn(reducer))
    }

    /// Folds the values per key: `aggregator(key, value, aggregate)` starting
    /// from `initializer()`.
    pub fn aggregate<A: Data + Send>(
        &self,
        initializer: impl Fn() -> A + Send + Sync + 'static,
        aggregator: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
    ) -> KTable<K, A>
    where
        K: Send,
    {
        self.aggregate_with(materialized, move |key, value, old| {
            Ok(aggregator(key, value, old.unwrap_or_else(&initializer)))
        })
    }

    /// [`aggregate`](Self::aggregate) with an initializer and aggregator
    /// that may fail: `aggregator(key, value, &aggregate)`. A failure is a
    /// processing error of the record (the processing handler decides); the
    /// key's aggregate stays as it was.
    pub fn try_aggregate<A: Data + Send>(
        &self,
        initializer: impl Fn() -> Result<A, ProcessorError> + Send + Sync + 'static,
        aggregator: impl Fn(&K, V, &A) -> Result<A, ProcessorError> + Send + Sync + 'static,
        materialized: Materialized<K, A>,
    ) -> KTable<K, A>
    where
        K: Send,
    {
        self.aggregate_with(materialized, try_aggregate_fn(initializer, aggregator))
    }

    fn aggregate_with<A: Data + Send>(
        &self,
        materialized: Materialized<K, A>,
        f: impl Fn(&K, V, Option<A>) -> Result<A, StepFailed<A>> + Send + Sync + 'static,
    ) -> KTable<K, A>
    where
        K: Send,
    {
        let f = Arc::new(f);
        let builder = self.stream.builder.clone();
        let mut b = builder.borrow_mut();
        let store_name = b.name_or(materialized.store_name, "KSTREAM-AGGREGATE-STATE-STORE-");
        let key = b.serde(
            materialized.key_serde,
            self.key_serde.clone(),
            &store_name,
            "key",
        );
        let value = b.serde(materialized.value_serde, None, &store_name, "value");
        let parent = self.aggregation_parent(&mut b, &store_name, &key);
        let name = b.name_or(self.stream.name.clone(), "KSTREAM-AGGREGATE-");
        let store = b.add_store(
            store_name.clone(),
            materialized.logging,
            StoreSerdes::new(key.clone(), value.clone()),
        );
        let store_for_node = store_name.clone();
        let key_for_node = key.clone();
        let f: AggregateFn<K, V, A> = f;
        let node = b.add_processor(name, &[parent], move || {
            AggregateNode::boxed(store_for_node.clone(), key_for_node.clone(), f.clone())
        });
        b.connect_store(node, store);
        drop(b);
        KTable::new(builder, node, Some(key), Some(value), Some(store_name))
    }
}

impl<K: Data, V: Data> KStream<K, V> {
    /// Groups by the current key, for an aggregation.
    pub fn group_by_key(&self, grouped: Grouped<K, V>) -> KGroupedStream<K, V> {
        KGroupedStream::new(self.clone(), grouped)
    }

    /// Groups by a new key computed from each record (a key change: the
    /// aggregation reads through a repartition topic).
    pub fn group_by<K2: Data>(
        &self,
        selector: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
        grouped: Grouped<K2, V>,
    ) -> KGroupedStream<K2, V> {
        KGroupedStream::new(self.select_key(selector), grouped)
    }
}
