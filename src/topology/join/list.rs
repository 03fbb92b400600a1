//! [`ListSerde`]: a list of values in one store entry.
//!
//! Join window stores keep one entry per key and timestamp; several records
//! with the same key and timestamp are kept as a list there (Kafka Streams
//! keeps duplicates in the window store instead). Format: for each element a
//! 4-byte big-endian length, then the element's bytes.

use crate::serdes::{Serde, SerdeError, SharedSerde, short_type_name};

/// Serializes `Vec<T>` with an element serde; see the module docs.
pub struct ListSerde<T>(SharedSerde<T>);

impl<T: 'static> ListSerde<T> {
    /// Lists of elements serialized by `inner`.
    pub fn new(inner: SharedSerde<T>) -> Self {
        ListSerde(inner)
    }
}

impl<T: 'static> Serde<Vec<T>> for ListSerde<T> {
    fn serialize(&self, topic: &str, data: &Vec<T>, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        let mut element = Vec::new();
        for item in data {
            element.clear();
            self.0.serialize(topic, item, &mut element)?;
            out.extend_from_slice(&(element.len() as u32).to_be_bytes());
            out.extend_from_slice(&element);
        }
        Ok(())
    }

    fn deserialize(&self, topic: &str, mut data: &[u8]) -> Result<Vec<T>, SerdeError> {
        let mut items = Vec::new();
        while !data.is_empty() {
            let truncated = |expected: usize, actual: usize| SerdeError::Length {
                type_name: short_type_name::<Vec<T>>(),
                expected,
                actual,
            };
            let Some((len, rest)) = data.split_first_chunk::<4>() else {
                return Err(truncated(4, data.len()));
            };
            let len = u32::from_be_bytes(*len) as usize;
            if rest.len() < len {
                return Err(truncated(len, rest.len()));
            }
            items.push(self.0.deserialize(topic, &rest[..len])?);
            data = &rest[len..];
        }
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serdes::StringSerde;
    use std::sync::Arc;

    #[test]
    fn round_trips_and_rejects_truncated_bytes() {
        let serde = ListSerde::new(Arc::new(StringSerde));
        let list = vec!["a".to_owned(), String::new(), "ccc".to_owned()];
        let mut bytes = Vec::new();
        serde.serialize("t", &list, &mut bytes).unwrap();
        assert_eq!(serde.deserialize("t", &bytes).unwrap(), list);
        assert!(serde.deserialize("t", &bytes[..bytes.len() - 1]).is_err());
        assert_eq!(serde.deserialize("t", &[]).unwrap(), Vec::<String>::new());
    }
}
