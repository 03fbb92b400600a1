//! Records as processors see them, and the metadata of the input record.

/// One record header: a key and an optional (nullable) value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Header key.
    pub key: String,
    /// Header value; `None` is a Kafka null.
    pub value: Option<Vec<u8>>,
}

/// The ordered headers of a record. Empty headers do not allocate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers {
    entries: Vec<Header>,
}

/// Empty headers, for records without any.
pub(crate) static NO_HEADERS: Headers = Headers {
    entries: Vec::new(),
};

impl Headers {
    /// No headers.
    pub const fn new() -> Self {
        Headers {
            entries: Vec::new(),
        }
    }

    /// Appends a header (Kafka allows repeated keys).
    pub fn add(&mut self, key: impl Into<String>, value: Option<Vec<u8>>) -> &mut Self {
        self.entries.push(Header {
            key: key.into(),
            value,
        });
        self
    }

    /// The value of the last header named `key`, if any.
    pub fn last(&self, key: &str) -> Option<&Header> {
        self.entries.iter().rev().find(|h| h.key == key)
    }

    /// The value of the last header named `key` as UTF-8 text, if present and valid.
    pub fn last_str(&self, key: &str) -> Option<&str> {
        self.last(key)
            .and_then(|h| h.value.as_deref())
            .and_then(|v| std::str::from_utf8(v).ok())
    }

    /// All headers in order.
    pub fn iter(&self) -> impl Iterator<Item = &Header> {
        self.entries.iter()
    }

    /// The number of headers.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no headers.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A typed record flowing through the processor graph.
///
/// `timestamp` is event time in milliseconds since the epoch (from the
/// source's timestamp extractor; a processor may change it before forwarding).
#[derive(Clone, Debug, PartialEq)]
pub struct Record<K, V> {
    /// The key.
    pub key: K,
    /// The value.
    pub value: V,
    /// Event time, milliseconds since the epoch.
    pub timestamp: i64,
    /// Headers, carried from the input record unless changed.
    pub headers: Headers,
}

impl<K, V> Record<K, V> {
    /// A record without headers.
    pub fn new(key: K, value: V, timestamp: i64) -> Self {
        Record {
            key,
            value,
            timestamp,
            headers: Headers::new(),
        }
    }

    /// The same record with another key (timestamp and headers kept).
    pub fn with_key<K2>(self, key: K2) -> Record<K2, V> {
        Record {
            key,
            value: self.value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }

    /// The same record with another value (timestamp and headers kept).
    pub fn with_value<V2>(self, value: V2) -> Record<K, V2> {
        Record {
            key: self.key,
            value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }

    /// The same record with another timestamp.
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }
}

/// Where the record being processed came from. Absent during punctuation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordMetadata<'a> {
    /// The input topic (for repartition topics, the full internal name).
    pub topic: &'a str,
    /// The input partition.
    pub partition: i32,
    /// The input offset.
    pub offset: i64,
}

/// An update of a table row: the new and the previous value. `new == None`
/// is a deletion (tombstone).
#[derive(Clone, Debug, PartialEq)]
pub struct Change<V> {
    /// The value after the update; `None` when the key was deleted.
    pub new: Option<V>,
    /// The value before the update; `None` when the key was absent.
    pub old: Option<V>,
}
