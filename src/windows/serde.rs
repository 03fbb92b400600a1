//! [`WindowedSerde`]: windowed keys on the wire, in Kafka Streams' layout.

use crate::serdes::{Serde, SerdeError, SharedSerde};

use super::{Window, Windowed};

/// Serde of [`Windowed<K>`] keys, byte-compatible with Kafka Streams:
///
/// * time windows (`TimeWindowedSerde`): `key ++ start` (8-byte big-endian);
///   the end is `start + size` on reading;
/// * sessions (`SessionWindowedSerde`): `key ++ end ++ start` (8 bytes each).
///
/// ```
/// use weir::serdes::{Serde, StringSerde};
/// use weir::windows::{Windowed, WindowedSerde};
///
/// let serde = WindowedSerde::time(StringSerde, 10);
/// let mut bytes = Vec::new();
/// serde.serialize("t", &Windowed::new("k".to_string(), 20, 30), &mut bytes).unwrap();
/// assert_eq!(bytes, [b"k".as_slice(), &20i64.to_be_bytes()].concat());
/// assert_eq!(serde.deserialize("t", &bytes).unwrap(), Windowed::new("k".to_string(), 20, 30));
/// ```
pub struct WindowedSerde<K> {
    inner: SharedSerde<K>,
    /// `Some(size)` for time windows, `None` for sessions.
    window_size_ms: Option<i64>,
}

impl<K> Clone for WindowedSerde<K> {
    fn clone(&self) -> Self {
        WindowedSerde {
            inner: self.inner.clone(),
            window_size_ms: self.window_size_ms,
        }
    }
}

impl<K: 'static> WindowedSerde<K> {
    /// Time-windowed keys of windows `window_size_ms` long.
    pub fn time(inner: impl Serde<K>, window_size_ms: i64) -> Self {
        Self::time_shared(std::sync::Arc::new(inner), window_size_ms)
    }

    /// Session-windowed keys.
    pub fn session(inner: impl Serde<K>) -> Self {
        Self::session_shared(std::sync::Arc::new(inner))
    }

    pub(crate) fn time_shared(inner: SharedSerde<K>, window_size_ms: i64) -> Self {
        WindowedSerde {
            inner,
            window_size_ms: Some(window_size_ms),
        }
    }

    pub(crate) fn session_shared(inner: SharedSerde<K>) -> Self {
        WindowedSerde {
            inner,
            window_size_ms: None,
        }
    }
}

fn read_i64(bytes: &[u8]) -> i64 {
    i64::from_be_bytes(bytes.try_into().expect("8 bytes"))
}

impl<K: 'static> Serde<Windowed<K>> for WindowedSerde<K> {
    fn serialize(
        &self,
        topic: &str,
        data: &Windowed<K>,
        out: &mut Vec<u8>,
    ) -> Result<(), SerdeError> {
        self.inner.serialize(topic, &data.key, out)?;
        if self.window_size_ms.is_none() {
            out.extend_from_slice(&data.window.end_ms.to_be_bytes());
        }
        out.extend_from_slice(&data.window.start_ms.to_be_bytes());
        Ok(())
    }

    fn deserialize(&self, topic: &str, data: &[u8]) -> Result<Windowed<K>, SerdeError> {
        let suffix = if self.window_size_ms.is_some() { 8 } else { 16 };
        let Some(split) = data.len().checked_sub(suffix) else {
            return Err(SerdeError::Length {
                type_name: "Windowed",
                expected: suffix,
                actual: data.len(),
            });
        };
        let key = self.inner.deserialize(topic, &data[..split])?;
        let window = match self.window_size_ms {
            Some(size) => {
                let start_ms = read_i64(&data[split..]);
                Window {
                    start_ms,
                    end_ms: start_ms + size,
                }
            }
            None => Window {
                end_ms: read_i64(&data[split..split + 8]),
                start_ms: read_i64(&data[split + 8..]),
            },
        };
        Ok(Windowed { key, window })
    }
}

/// Serde of a list of values: each as a 4-byte big-endian length and its
/// bytes. Used for the record buffer of sliding windows.
pub(crate) struct ListSerde<V>(pub(crate) SharedSerde<V>);

impl<V: 'static> Serde<Vec<V>> for ListSerde<V> {
    fn serialize(&self, topic: &str, data: &Vec<V>, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        let mut item = Vec::new();
        for v in data {
            item.clear();
            self.0.serialize(topic, v, &mut item)?;
            let len = u32::try_from(item.len()).map_err(|_| SerdeError::Length {
                type_name: "list item",
                expected: u32::MAX as usize,
                actual: item.len(),
            })?;
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&item);
        }
        Ok(())
    }

    fn deserialize(&self, topic: &str, mut data: &[u8]) -> Result<Vec<V>, SerdeError> {
        let mut out = Vec::new();
        while !data.is_empty() {
            let truncated = |actual| SerdeError::Length {
                type_name: "list item",
                expected: 4,
                actual,
            };
            let len_bytes: [u8; 4] = data
                .get(..4)
                .ok_or_else(|| truncated(data.len()))?
                .try_into()
                .expect("4 bytes");
            let len = u32::from_be_bytes(len_bytes) as usize;
            let item = data.get(4..4 + len).ok_or_else(|| truncated(data.len()))?;
            out.push(self.0.deserialize(topic, item)?);
            data = &data[4 + len..];
        }
        Ok(out)
    }
}
