//! Serdes: how typed keys and values become Kafka bytes and back.
//!
//! A [`Serde<T>`] serializes a `T` into a caller-provided buffer and
//! deserializes it from a byte slice. The graph deserializes **once** at the
//! source node and serializes **once** at a sink or store write; everything in
//! between moves typed values.
//!
//! # Nulls
//!
//! Kafka keys and values may be null. A serde decides what a null means through
//! [`Serde::deserialize_nullable`] / [`Serde::serialize_nullable`]: the plain
//! serdes reject a null ([`SerdeError::Null`]); [`UnitSerde`] maps null to `()`
//! (the key type of key-less topics) and [`OptionSerde`] maps null to `None`
//! (tombstones).
//!
//! # Wire formats
//!
//! The numeric serdes use big-endian fixed-width encodings, byte-compatible with
//! Kafka's Java `IntegerSerde`, `LongSerde` and `DoubleSerde`. [`StringSerde`] is
//! UTF-8 like Java's `StringSerde`. [`JsonSerde`] uses `serde_json`.
//!
//! # Defaults
//!
//! Where a DSL call gets no explicit serde it looks one up by type in the
//! builder's [`SerdeRegistry`] ("default serdes from config", typed).

mod registry;

pub use registry::SerdeRegistry;

use std::marker::PhantomData;
use std::sync::Arc;

/// Why a value could not be serialized or deserialized.
#[derive(Debug, thiserror::Error)]
pub enum SerdeError {
    /// The bytes have the wrong length for a fixed-width type.
    #[error(
        "{type_name}: expected {expected} bytes, got {actual}; is the topic written with a matching serde?"
    )]
    Length {
        /// The target type.
        type_name: &'static str,
        /// The required byte length.
        expected: usize,
        /// The length found.
        actual: usize,
    },
    /// The bytes are not valid UTF-8.
    #[error("String: bytes are not valid UTF-8 at byte {valid_up_to}")]
    Utf8 {
        /// Length of the valid prefix.
        valid_up_to: usize,
    },
    /// JSON (de)serialization failed.
    #[error("JSON for {type_name}: {source}")]
    Json {
        /// The target type.
        type_name: &'static str,
        /// The `serde_json` error.
        #[source]
        source: serde_json::Error,
    },
    /// A null was met where the serde's type has no null.
    #[error("{type_name}: got a null (absent) key or value; use Option<T> or () for nullable data")]
    Null {
        /// The target type.
        type_name: &'static str,
    },
    /// A serde written outside Weir (a Python callable, say) failed.
    #[error("{0}")]
    Custom(String),
    /// Non-null bytes were met where only null is allowed.
    #[error(
        "(): expected a null key or value, got {len} bytes; use a byte or string serde for this field"
    )]
    NotNull {
        /// Number of bytes found.
        len: usize,
    },
}

/// Converts `T` to and from Kafka bytes.
///
/// Implementations are shared across tasks and threads, so they must be
/// `Send + Sync`; they should be cheap and allocation-free where the format
/// allows (the output buffer is reused by the caller).
///
/// ```
/// use weir::serdes::{I64Serde, Serde};
/// let mut buf = Vec::new();
/// I64Serde.serialize("topic", &42, &mut buf).unwrap();
/// assert_eq!(buf, 42i64.to_be_bytes());
/// assert_eq!(I64Serde.deserialize("topic", &buf).unwrap(), 42);
/// ```
pub trait Serde<T>: Send + Sync + 'static {
    /// Appends the encoding of `data` to `out` (which the caller cleared).
    fn serialize(&self, topic: &str, data: &T, out: &mut Vec<u8>) -> Result<(), SerdeError>;

    /// Decodes a non-null `data`.
    fn deserialize(&self, topic: &str, data: &[u8]) -> Result<T, SerdeError>;

    /// Like [`Serde::serialize`], but may produce a Kafka null: returns
    /// `false` when `data` is encoded as null (nothing written).
    fn serialize_nullable(
        &self,
        topic: &str,
        data: &T,
        out: &mut Vec<u8>,
    ) -> Result<bool, SerdeError> {
        self.serialize(topic, data, out)?;
        Ok(true)
    }

    /// Like [`Serde::deserialize`], but accepts a Kafka null (`None`). By
    /// default a null is an error.
    fn deserialize_nullable(&self, topic: &str, data: Option<&[u8]>) -> Result<T, SerdeError> {
        match data {
            Some(bytes) => self.deserialize(topic, bytes),
            None => Err(SerdeError::Null {
                type_name: short_type_name::<T>(),
            }),
        }
    }
}

/// A shared, type-erased-by-trait serde handle as stored in topologies.
pub type SharedSerde<T> = Arc<dyn Serde<T>>;

pub(crate) fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    // Keep generic arguments readable: strip the module path of the outer type only.
    match full.find('<') {
        Some(open) => {
            let head = &full[..open];
            let start = head.rfind("::").map_or(0, |i| i + 2);
            &full[start..]
        }
        None => full.rsplit("::").next().unwrap_or(full),
    }
}

/// UTF-8 strings (Java `Serdes.String()`).
#[derive(Clone, Copy, Debug, Default)]
pub struct StringSerde;

impl Serde<String> for StringSerde {
    fn serialize(&self, _topic: &str, data: &String, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        out.extend_from_slice(data.as_bytes());
        Ok(())
    }
    fn deserialize(&self, _topic: &str, data: &[u8]) -> Result<String, SerdeError> {
        match std::str::from_utf8(data) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(SerdeError::Utf8 {
                valid_up_to: e.valid_up_to(),
            }),
        }
    }
}

/// Raw bytes, unchanged (Java `Serdes.ByteArray()`).
#[derive(Clone, Copy, Debug, Default)]
pub struct BytesSerde;

impl Serde<Vec<u8>> for BytesSerde {
    fn serialize(&self, _topic: &str, data: &Vec<u8>, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        out.extend_from_slice(data);
        Ok(())
    }
    fn deserialize(&self, _topic: &str, data: &[u8]) -> Result<Vec<u8>, SerdeError> {
        Ok(data.to_vec())
    }
}

macro_rules! fixed_width_serde {
    ($(#[$doc:meta])* $name:ident, $ty:ty, $width:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl Serde<$ty> for $name {
            fn serialize(&self, _topic: &str, data: &$ty, out: &mut Vec<u8>) -> Result<(), SerdeError> {
                out.extend_from_slice(&data.to_be_bytes());
                Ok(())
            }
            fn deserialize(&self, _topic: &str, data: &[u8]) -> Result<$ty, SerdeError> {
                let bytes: [u8; $width] = data.try_into().map_err(|_| SerdeError::Length {
                    type_name: stringify!($ty),
                    expected: $width,
                    actual: data.len(),
                })?;
                Ok(<$ty>::from_be_bytes(bytes))
            }
        }
    };
}

fixed_width_serde!(
    /// 4-byte big-endian `i32` (Java `Serdes.Integer()`).
    I32Serde,
    i32,
    4
);
fixed_width_serde!(
    /// 8-byte big-endian `i64` (Java `Serdes.Long()`).
    I64Serde,
    i64,
    8
);
fixed_width_serde!(
    /// 8-byte big-endian IEEE-754 `f64` (Java `Serdes.Double()`).
    F64Serde,
    f64,
    8
);

/// The unit type as a Kafka null (Java `Serdes.Void()`): the key type of
/// topics whose records have no key.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnitSerde;

impl Serde<()> for UnitSerde {
    fn serialize(&self, _topic: &str, _data: &(), _out: &mut Vec<u8>) -> Result<(), SerdeError> {
        Ok(())
    }
    fn deserialize(&self, _topic: &str, data: &[u8]) -> Result<(), SerdeError> {
        Err(SerdeError::NotNull { len: data.len() })
    }
    fn serialize_nullable(
        &self,
        _topic: &str,
        _data: &(),
        _out: &mut Vec<u8>,
    ) -> Result<bool, SerdeError> {
        Ok(false)
    }
    fn deserialize_nullable(&self, topic: &str, data: Option<&[u8]>) -> Result<(), SerdeError> {
        match data {
            None => Ok(()),
            Some(bytes) => self.deserialize(topic, bytes),
        }
    }
}

/// Any `serde` type as JSON text.
///
/// ```
/// use weir::serdes::{JsonSerde, Serde};
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// struct Reading { sensor: String, celsius: f64 }
/// let serde = JsonSerde::<Reading>::new();
/// let mut buf = Vec::new();
/// let r = Reading { sensor: "a".into(), celsius: 21.5 };
/// serde.serialize("t", &r, &mut buf).unwrap();
/// assert_eq!(serde.deserialize("t", &buf).unwrap(), r);
/// ```
pub struct JsonSerde<T>(PhantomData<fn() -> T>);

impl<T> JsonSerde<T> {
    /// A JSON serde for `T`.
    pub fn new() -> Self {
        JsonSerde(PhantomData)
    }
}

impl<T> Default for JsonSerde<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for JsonSerde<T> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for JsonSerde<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JsonSerde<{}>", short_type_name::<T>())
    }
}

impl<T> Serde<T> for JsonSerde<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned + 'static,
{
    fn serialize(&self, _topic: &str, data: &T, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        serde_json::to_writer(out, data).map_err(|source| SerdeError::Json {
            type_name: short_type_name::<T>(),
            source,
        })
    }
    fn deserialize(&self, _topic: &str, data: &[u8]) -> Result<T, SerdeError> {
        serde_json::from_slice(data).map_err(|source| SerdeError::Json {
            type_name: short_type_name::<T>(),
            source,
        })
    }
}

/// Wraps a serde of `T` into a serde of `Option<T>` where `None` is a Kafka
/// null (a tombstone, for table values).
pub struct OptionSerde<T>(SharedSerde<T>);

impl<T: 'static> OptionSerde<T> {
    /// Wraps `inner`.
    pub fn new(inner: impl Serde<T>) -> Self {
        OptionSerde(Arc::new(inner))
    }

    /// Wraps an already shared serde.
    pub fn from_shared(inner: SharedSerde<T>) -> Self {
        OptionSerde(inner)
    }
}

impl<T: 'static> Serde<Option<T>> for OptionSerde<T> {
    fn serialize(
        &self,
        topic: &str,
        data: &Option<T>,
        out: &mut Vec<u8>,
    ) -> Result<(), SerdeError> {
        match data {
            Some(v) => self.0.serialize(topic, v, out),
            None => Err(SerdeError::Null {
                type_name: short_type_name::<T>(),
            }),
        }
    }
    fn deserialize(&self, topic: &str, data: &[u8]) -> Result<Option<T>, SerdeError> {
        self.0.deserialize(topic, data).map(Some)
    }
    fn serialize_nullable(
        &self,
        topic: &str,
        data: &Option<T>,
        out: &mut Vec<u8>,
    ) -> Result<bool, SerdeError> {
        match data {
            Some(v) => self.0.serialize_nullable(topic, v, out),
            None => Ok(false),
        }
    }
    fn deserialize_nullable(
        &self,
        topic: &str,
        data: Option<&[u8]>,
    ) -> Result<Option<T>, SerdeError> {
        match data {
            Some(bytes) => self.0.deserialize(topic, bytes).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip<T: PartialEq + std::fmt::Debug + 'static>(serde: &dyn Serde<T>, v: T) -> Vec<u8> {
        let mut buf = Vec::new();
        serde.serialize("t", &v, &mut buf).unwrap();
        assert_eq!(serde.deserialize("t", &buf).unwrap(), v);
        buf
    }

    #[test]
    fn numeric_serdes_match_java_big_endian() {
        assert_eq!(roundtrip(&I32Serde, 1), vec![0, 0, 0, 1]);
        assert_eq!(
            roundtrip(&I64Serde, -2),
            vec![0xff; 7].into_iter().chain([0xfe]).collect::<Vec<_>>()
        );
        assert_eq!(roundtrip(&F64Serde, 1.5), 1.5f64.to_be_bytes().to_vec());
        let err = I64Serde.deserialize("t", &[1, 2]).unwrap_err();
        assert!(err.to_string().contains("expected 8 bytes, got 2"), "{err}");
    }

    #[test]
    fn strings_and_bytes() {
        assert_eq!(
            roundtrip(&StringSerde, "héllo".to_string()),
            "héllo".as_bytes()
        );
        assert_eq!(roundtrip(&BytesSerde, vec![0, 255]), vec![0, 255]);
        assert!(matches!(
            StringSerde.deserialize("t", &[0xff]),
            Err(SerdeError::Utf8 { valid_up_to: 0 })
        ));
    }

    #[test]
    fn nulls() {
        assert!(matches!(
            StringSerde.deserialize_nullable("t", None),
            Err(SerdeError::Null { .. })
        ));
        UnitSerde.deserialize_nullable("t", None).unwrap();
        assert!(UnitSerde.deserialize_nullable("t", Some(b"x")).is_err());
        let opt = OptionSerde::new(I32Serde);
        assert_eq!(opt.deserialize_nullable("t", None).unwrap(), None);
        let mut buf = Vec::new();
        assert!(!opt.serialize_nullable("t", &None, &mut buf).unwrap());
        assert!(opt.serialize_nullable("t", &Some(7), &mut buf).unwrap());
        assert_eq!(buf, 7i32.to_be_bytes());
    }

    #[test]
    fn json() {
        let s = JsonSerde::<Vec<i32>>::new();
        assert_eq!(roundtrip(&s, vec![1, 2]), b"[1,2]");
        assert!(matches!(
            s.deserialize("t", b"{"),
            Err(SerdeError::Json { .. })
        ));
    }
}
