//! Type erasure of the processor graph.
//!
//! # Design
//!
//! The DSL is typed (`KStream<K, V>`); the task holds its nodes as
//! `Box<dyn ErasedNode>` so one task type runs any topology. A record crosses
//! an edge as `&mut dyn Any` pointing at an `Option<Record<K, V>>` **on the
//! sender's stack**: the receiver downcasts the reference (a type-id compare)
//! and `take`s the record. Nothing is boxed per record; the only per-record
//! allocations are the ones the record's own data needs (deserialized values,
//! headers when present, clones when forwarding to several children).
//!
//! Sources deserialize once; sinks and stores serialize once into reusable
//! buffers. Every DSL operator is an ordinary [`Processor`] run through the
//! same [`ProcessorNode`] adapter as user processors.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::serdes::SharedSerde;
use crate::time::TimestampExtractor;
use crate::topology::StreamPartitioner;

use super::Processor;
use super::collector::{OutputKind, OutputRecord};
use super::context::ProcessorContext;
use super::error::{KeyOrValue, ProcessorError};
use super::record::Record;
use super::task::InputRecord;

pub(crate) use super::frame::{ErasedNode, Frame, SourceError};

fn take_record<K: 'static, V: 'static>(
    frame: &Frame<'_>,
    node: usize,
    input: &mut dyn Any,
) -> Result<Record<K, V>, ProcessorError> {
    input
        .downcast_mut::<Option<Record<K, V>>>()
        .and_then(Option::take)
        .ok_or_else(|| ProcessorError::TypeMismatch {
            node: frame.nodes[node].name.clone(),
            expected: std::any::type_name::<Record<K, V>>(),
        })
}

/// The record types of a node, as a `Send + Sync` marker.
type RecordTypes<KIn, VIn, KOut, VOut> = PhantomData<fn(KIn, VIn) -> (KOut, VOut)>;

/// Runs a typed [`Processor`] as a graph node.
pub(crate) struct ProcessorNode<P, KIn, VIn, KOut, VOut> {
    processor: P,
    _types: RecordTypes<KIn, VIn, KOut, VOut>,
}

impl<P, KIn, VIn, KOut, VOut> ProcessorNode<P, KIn, VIn, KOut, VOut>
where
    P: Processor<KIn, VIn, KOut, VOut>,
    KIn: 'static,
    VIn: 'static,
    KOut: 'static,
    VOut: 'static,
{
    pub(crate) fn boxed(processor: P) -> Box<dyn ErasedNode> {
        Box::new(ProcessorNode {
            processor,
            _types: PhantomData,
        })
    }
}

impl<P, KIn, VIn, KOut, VOut> ErasedNode for ProcessorNode<P, KIn, VIn, KOut, VOut>
where
    P: Processor<KIn, VIn, KOut, VOut>,
    KIn: 'static,
    VIn: 'static,
    KOut: 'static,
    VOut: 'static,
{
    fn init<'a>(&mut self, frame: &'a Frame<'a>, node: usize) -> Result<(), ProcessorError> {
        self.processor.init(&ProcessorContext::new(frame, node))
    }

    fn process<'a>(
        &mut self,
        frame: &'a Frame<'a>,
        node: usize,
        input: &mut dyn Any,
    ) -> Result<(), ProcessorError> {
        let record = take_record::<KIn, VIn>(frame, node, input)?;
        let previous = frame.current_timestamp.replace(record.timestamp);
        let result = self
            .processor
            .process(&ProcessorContext::new(frame, node), record);
        frame.current_timestamp.set(previous);
        result
    }

    fn close(&mut self) {
        self.processor.close();
    }
}

/// Crate-internal hooks of a processor that holds updates in the record
/// cache; [`CachingNode`] runs such a processor as a node.
pub(crate) trait CacheHooks<KOut, VOut> {
    /// Forwards (and writes) what the processor held back.
    fn flush(&mut self, ctx: &ProcessorContext<'_, KOut, VOut>) -> Result<(), ProcessorError>;
    /// Drops what the processor held back.
    fn discard(&mut self);
}

/// Runs a typed [`Processor`] with [`CacheHooks`] as a graph node.
pub(crate) struct CachingNode<P, KIn, VIn, KOut, VOut>(ProcessorNode<P, KIn, VIn, KOut, VOut>);

impl<P, KIn, VIn, KOut, VOut> CachingNode<P, KIn, VIn, KOut, VOut>
where
    P: Processor<KIn, VIn, KOut, VOut> + CacheHooks<KOut, VOut>,
    KIn: 'static,
    VIn: 'static,
    KOut: 'static,
    VOut: 'static,
{
    pub(crate) fn boxed(processor: P) -> Box<dyn ErasedNode> {
        Box::new(CachingNode(ProcessorNode {
            processor,
            _types: PhantomData,
        }))
    }
}

impl<P, KIn, VIn, KOut, VOut> ErasedNode for CachingNode<P, KIn, VIn, KOut, VOut>
where
    P: Processor<KIn, VIn, KOut, VOut> + CacheHooks<KOut, VOut>,
    KIn: 'static,
    VIn: 'static,
    KOut: 'static,
    VOut: 'static,
{
    fn init<'a>(&mut self, frame: &'a Frame<'a>, node: usize) -> Result<(), ProcessorError> {
        self.0.init(frame, node)
    }

    fn process<'a>(
        &mut self,
        frame: &'a Frame<'a>,
        node: usize,
        input: &mut dyn Any,
    ) -> Result<(), ProcessorError> {
        self.0.process(frame, node, input)
    }

    fn flush<'a>(&mut self, frame: &'a Frame<'a>, node: usize) -> Result<(), ProcessorError> {
        self.0.processor.flush(&ProcessorContext::new(frame, node))
    }

    fn discard(&mut self) {
        self.0.processor.discard();
    }

    fn close(&mut self) {
        self.0.processor.discard();
        self.0.close();
    }
}

/// A processor from a closure: how the DSL's stateless operators are built.
pub(crate) struct FnProcessor<F>(pub(crate) F);

impl<F, KIn, VIn, KOut, VOut> Processor<KIn, VIn, KOut, VOut> for FnProcessor<F>
where
    F: FnMut(&ProcessorContext<'_, KOut, VOut>, Record<KIn, VIn>) -> Result<(), ProcessorError>
        + Send
        + 'static,
{
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, KOut, VOut>,
        record: Record<KIn, VIn>,
    ) -> Result<(), ProcessorError> {
        (self.0)(ctx, record)
    }
}

/// Boxes a closure processor as a node.
pub(crate) fn fn_node<KIn, VIn, KOut, VOut, F>(f: F) -> Box<dyn ErasedNode>
where
    F: FnMut(&ProcessorContext<'_, KOut, VOut>, Record<KIn, VIn>) -> Result<(), ProcessorError>
        + Send
        + 'static,
    KIn: 'static,
    VIn: 'static,
    KOut: 'static,
    VOut: 'static,
{
    ProcessorNode::<_, KIn, VIn, KOut, VOut>::boxed(FnProcessor(f))
}

/// Reads input records: deserializes, extracts the timestamp, advances stream
/// time and forwards.
pub(crate) struct SourceNode<K, V> {
    pub(crate) key_serde: SharedSerde<K>,
    pub(crate) value_serde: SharedSerde<V>,
    pub(crate) extractor: Arc<dyn TimestampExtractor<K, V>>,
}

impl<K: Clone + 'static, V: Clone + 'static> ErasedNode for SourceNode<K, V> {
    fn process<'a>(
        &mut self,
        frame: &'a Frame<'a>,
        node: usize,
        input: &mut dyn Any,
    ) -> Result<(), ProcessorError> {
        // A source can also be fed by the graph (it never is by the DSL).
        let record = take_record::<K, V>(frame, node, input)?;
        ProcessorContext::<K, V>::new(frame, node).forward(record)
    }

    fn process_input<'a>(
        &mut self,
        frame: &'a Frame<'a>,
        node: usize,
        input: &InputRecord<'_>,
    ) -> Result<(), SourceError> {
        let key = self
            .key_serde
            .deserialize_nullable(input.topic, input.key)
            .map_err(|source| SourceError::Deserialize {
                what: KeyOrValue::Key,
                source,
            })?;
        let value = self
            .value_serde
            .deserialize_nullable(input.topic, input.value)
            .map_err(|source| SourceError::Deserialize {
                what: KeyOrValue::Value,
                source,
            })?;
        let timestamp =
            self.extractor
                .extract(&key, &value, input.timestamp, frame.stream_time.get());
        if timestamp < 0 {
            return Err(SourceError::InvalidTimestamp(timestamp));
        }
        if timestamp > frame.stream_time.get() {
            frame.stream_time.set(timestamp);
        }
        frame.current_timestamp.set(timestamp);
        let record = Record {
            key,
            value,
            timestamp,
            headers: input.headers.clone(),
        };
        ProcessorContext::<K, V>::new(frame, node)
            .forward(record)
            .map_err(SourceError::Processing)
    }
}

/// Writes records to a topic through the collector.
pub(crate) struct SinkNode<K, V> {
    pub(crate) topic: String,
    pub(crate) kind: OutputKind,
    pub(crate) key_serde: SharedSerde<K>,
    pub(crate) value_serde: SharedSerde<V>,
    pub(crate) partitioner: Option<Arc<dyn StreamPartitioner<K, V>>>,
    pub(crate) key_buf: Vec<u8>,
    pub(crate) value_buf: Vec<u8>,
}

impl<K: 'static, V: 'static> ErasedNode for SinkNode<K, V> {
    fn process<'a>(
        &mut self,
        frame: &'a Frame<'a>,
        node: usize,
        input: &mut dyn Any,
    ) -> Result<(), ProcessorError> {
        let record = take_record::<K, V>(frame, node, input)?;
        self.key_buf.clear();
        self.value_buf.clear();
        let has_key = self
            .key_serde
            .serialize_nullable(&self.topic, &record.key, &mut self.key_buf)
            .map_err(ProcessorError::serialize(KeyOrValue::Key, &self.topic))?;
        let has_value = self
            .value_serde
            .serialize_nullable(&self.topic, &record.value, &mut self.value_buf)
            .map_err(ProcessorError::serialize(KeyOrValue::Value, &self.topic))?;
        let mut collector = frame.collector.borrow_mut();
        let partition = match &self.partitioner {
            Some(p) => collector
                .partition_count(&self.topic)
                .and_then(|n| p.partition(&self.topic, &record.key, &record.value, n)),
            None => None,
        };
        collector.send(OutputRecord {
            topic: &self.topic,
            partition,
            key: has_key.then_some(self.key_buf.as_slice()),
            value: has_value.then_some(self.value_buf.as_slice()),
            timestamp: record.timestamp,
            headers: &record.headers,
            kind: self.kind,
        })?;
        Ok(())
    }
}
