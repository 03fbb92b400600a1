//! Typed handles for the driver's input and output topics.

use std::sync::Arc;

use crate::processor::{Headers, OutputKind};
use crate::serdes::{Serde, SharedSerde};

use super::DriverError;

/// A record the tasks wrote, as bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct ProducedRecord {
    /// Full topic name.
    pub topic: String,
    /// Explicit partition, if the sink chose one.
    pub partition: Option<i32>,
    /// Offset in the driver's topic log.
    pub offset: i64,
    /// Key bytes (`None` = null).
    pub key: Option<Vec<u8>>,
    /// Value bytes (`None` = null / tombstone).
    pub value: Option<Vec<u8>>,
    /// Timestamp (ms).
    pub timestamp: i64,
    /// Headers.
    pub headers: Headers,
    /// What produced it.
    pub kind: OutputKind,
}

/// A decoded output record.
#[derive(Clone, Debug, PartialEq)]
pub struct TestRecord<K, V> {
    /// Key.
    pub key: K,
    /// Value.
    pub value: V,
    /// Timestamp (ms).
    pub timestamp: i64,
    /// Headers.
    pub headers: Headers,
}

/// Key and value bytes of an encoded test record (`None` = null).
pub(crate) type EncodedRecord = (Option<Vec<u8>>, Option<Vec<u8>>);

/// An input topic with the serdes to encode test records.
pub struct TestInputTopic<K, V> {
    name: String,
    key_serde: SharedSerde<K>,
    value_serde: SharedSerde<V>,
}

impl<K: 'static, V: 'static> TestInputTopic<K, V> {
    /// Topic `name`, encoding with these serdes.
    pub fn new(
        name: impl Into<String>,
        key_serde: impl Serde<K>,
        value_serde: impl Serde<V>,
    ) -> Self {
        TestInputTopic {
            name: name.into(),
            key_serde: Arc::new(key_serde),
            value_serde: Arc::new(value_serde),
        }
    }

    /// The topic name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn encode(&self, key: &K, value: &V) -> Result<EncodedRecord, DriverError> {
        let err = |source| DriverError::Serde {
            topic: self.name.clone(),
            source,
        };
        let mut k = Vec::new();
        let mut v = Vec::new();
        let has_key = self
            .key_serde
            .serialize_nullable(&self.name, key, &mut k)
            .map_err(err)?;
        let has_value = self
            .value_serde
            .serialize_nullable(&self.name, value, &mut v)
            .map_err(err)?;
        Ok((has_key.then_some(k), has_value.then_some(v)))
    }
}

/// An output topic with the serdes to decode its records.
pub struct TestOutputTopic<K, V> {
    name: String,
    key_serde: SharedSerde<K>,
    value_serde: SharedSerde<V>,
}

impl<K: 'static, V: 'static> TestOutputTopic<K, V> {
    /// Topic `name` (full name), decoding with these serdes.
    pub fn new(
        name: impl Into<String>,
        key_serde: impl Serde<K>,
        value_serde: impl Serde<V>,
    ) -> Self {
        TestOutputTopic {
            name: name.into(),
            key_serde: Arc::new(key_serde),
            value_serde: Arc::new(value_serde),
        }
    }

    /// The topic name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn decode(&self, r: &ProducedRecord) -> Result<TestRecord<K, V>, DriverError> {
        let err = |source| DriverError::Serde {
            topic: self.name.clone(),
            source,
        };
        Ok(TestRecord {
            key: self
                .key_serde
                .deserialize_nullable(&self.name, r.key.as_deref())
                .map_err(err)?,
            value: self
                .value_serde
                .deserialize_nullable(&self.name, r.value.as_deref())
                .map_err(err)?,
            timestamp: r.timestamp,
            headers: r.headers.clone(),
        })
    }
}
