//! Values with a timestamp, for the DSL's timestamped key-value and window
//! stores (Kafka Streams' `ValueAndTimestamp`).
//!
//! Layout: the record timestamp in milliseconds as 8 big-endian bytes
//! (two's complement, as Kafka Streams writes it), then the value bytes.
//! Stores stay byte-oriented; this is only an encoding on top.
//!
//! ```
//! use weir::state::timestamped;
//!
//! let raw = timestamped::encode(1_700_000_000_000, b"v");
//! assert_eq!(timestamped::decode(&raw), Some((1_700_000_000_000, &b"v"[..])));
//! ```

/// Encodes `value` with its timestamp.
pub fn encode(timestamp_ms: i64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + value.len());
    out.extend_from_slice(&timestamp_ms.to_be_bytes());
    out.extend_from_slice(value);
    out
}

/// Splits an encoded value into timestamp and value; `None` when `raw` is
/// shorter than the 8 timestamp bytes.
pub fn decode(raw: &[u8]) -> Option<(i64, &[u8])> {
    let ts: [u8; 8] = raw.get(..8)?.try_into().ok()?;
    Some((i64::from_be_bytes(ts), &raw[8..]))
}
