//! Interactive queries over HTTP, on the instance's own server: the
//! stores as JSON, keys from URL text.
//!
//! * `GET /stores` — the topology's stores: name, kind, key and value
//!   types, and which of this instance's tasks hold them.
//! * `GET /stores/{store}/keys/{key}` — one key's committed value. The key
//!   is one path segment, percent-decoded exactly once, then turned into
//!   the store's key type (`String`: the text; integers: the number;
//!   other types: the text as JSON through the bytes).
//! * `GET /stores/{store}/range?from=&to=` — entries between two keys,
//!   inclusive, either end optional (percent-decoded likewise).
//!
//! Values are rendered by the store's declared types: strings as JSON
//! strings, integers and floats as numbers, bytes (`Vec<u8>`) as base64,
//! anything else as its JSON text when it is JSON, else as a string, else
//! base64. Answers name the instance (`served_by`, the HTTP address) and
//! the task. A key whose task runs on another instance is a 404 naming
//! that task (this server does not forward); a task that restores, or an
//! application that is not running, is a 503 with `Retry-After`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::query::{KvRead, QueryBus};
use super::{AppState, StateCell};
use crate::processor::TaskId;
use crate::topology::Topology;

/// What the server knows of one store.
struct StoreInfo {
    kind: &'static str,
    subtopology: u32,
    key_type: &'static str,
    value_type: &'static str,
}

/// An HTTP answer: status, JSON body, and whether to add `Retry-After`.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Value,
    pub(crate) retry_after: bool,
}

impl Answer {
    fn ok(body: Value) -> Self {
        Answer {
            status: 200,
            body,
            retry_after: false,
        }
    }

    fn error(status: u16, reason: impl Into<String>) -> Self {
        Answer {
            status,
            body: json!({ "error": reason.into() }),
            retry_after: status == 503,
        }
    }
}

/// The store queries of one instance, for its HTTP server.
pub(crate) struct StoreService {
    bus: Arc<QueryBus>,
    state: Arc<StateCell>,
    stores: BTreeMap<String, StoreInfo>,
    /// This instance's HTTP address, named in answers (set once bound).
    served_by: std::sync::OnceLock<String>,
}

impl StoreService {
    pub(crate) fn new(bus: Arc<QueryBus>, state: Arc<StateCell>, topology: &Topology) -> Self {
        let mut stores = BTreeMap::new();
        for (index, sub) in topology.subtopologies.iter().enumerate() {
            for &s in &sub.stores {
                let def = &topology.stores[s];
                stores.insert(
                    def.name.clone(),
                    StoreInfo {
                        kind: def.kind.label(),
                        subtopology: index as u32,
                        key_type: def.serdes.key_type,
                        value_type: def.serdes.value_type,
                    },
                );
            }
        }
        StoreService {
            bus,
            state,
            stores,
            served_by: std::sync::OnceLock::new(),
        }
    }

    /// Records the address answers name as `served_by`.
    pub(crate) fn set_served_by(&self, addr: String) {
        let _ = self.served_by.set(addr);
    }

    fn served_by(&self) -> &str {
        self.served_by.get().map_or("", String::as_str)
    }

    /// Answers `GET {path}?{query}` for a path under `/stores`.
    pub(crate) fn answer(&self, path: &str, query: &str) -> Answer {
        let segments: Vec<&str> = path
            .trim_start_matches('/')
            .split('/')
            .skip(1) // "stores"
            .collect();
        match segments.as_slice() {
            [] | [""] => self.list(),
            [store, "keys", key] => self.key(store, key),
            [store, "range"] => self.range(store, query),
            _ => Answer::error(
                404,
                format!(
                    "no such resource {path:?}; use /stores, /stores/{{store}}/keys/{{key}} or /stores/{{store}}/range?from=&to="
                ),
            ),
        }
    }

    fn list(&self) -> Answer {
        let stores: Vec<Value> = self
            .stores
            .iter()
            .map(|(name, info)| {
                json!({
                    "name": name,
                    "kind": info.kind,
                    "key_type": info.key_type,
                    "value_type": info.value_type,
                })
            })
            .collect();
        Answer::ok(json!({ "stores": stores, "served_by": self.served_by() }))
    }

    /// The store named by an (encoded) path segment, if it is a key-value
    /// store.
    fn store(&self, encoded: &str) -> Result<(String, &StoreInfo), Answer> {
        let name = percent_decode(encoded).map_err(|e| Answer::error(400, e))?;
        let Some(info) = self.stores.get(&name) else {
            return Err(Answer::error(
                404,
                format!(
                    "no store named {name:?}; the stores are {:?}",
                    self.stores.keys().collect::<Vec<_>>()
                ),
            ));
        };
        if info.kind != "key-value" {
            return Err(Answer::error(
                400,
                format!(
                    "store {name:?} is a {} store; only key-value stores are served here",
                    info.kind
                ),
            ));
        }
        Ok((name, info))
    }

    fn key(&self, store: &str, encoded_key: &str) -> Answer {
        let (name, info) = match self.store(store) {
            Ok(found) => found,
            Err(answer) => return answer,
        };
        let text = match percent_decode(encoded_key) {
            Ok(text) => text,
            Err(e) => return Answer::error(400, e),
        };
        let key = match key_bytes(info.key_type, &text) {
            Ok(key) => key,
            Err(e) => return Answer::error(400, format!("key {text:?}: {e}")),
        };
        let Some(task) = self.bus.task_of(info.subtopology, &key) else {
            return Answer::error(503, "the application has not started");
        };
        let merged = match self.bus.ask(&name, KvRead::Get(key), Some(task)) {
            Ok(merged) => merged,
            Err(e) => return Answer::error(503, e.to_string()),
        };
        if merged.restoring.contains(&task) {
            return Answer::error(503, format!("task {task} is restoring"));
        }
        if !merged.running.contains(&task) {
            let state = self.state.get();
            if state != AppState::Running {
                return Answer::error(503, format!("the application is {state:?}"));
            }
            return self.elsewhere(&name, &text, task);
        }
        match merged.entries.into_iter().next() {
            Some((_, value)) => Answer::ok(json!({
                "store": name,
                "key": text,
                "value": render(info.value_type, &value),
                "task": task.to_string(),
                "served_by": self.served_by(),
            })),
            None => Answer::error(
                404,
                format!("key {text:?} is not in store {name:?} (task {task})"),
            ),
        }
    }

    fn elsewhere(&self, store: &str, key: &str, task: TaskId) -> Answer {
        Answer {
            status: 404,
            body: json!({
                "error": format!("key {key:?} of store {store:?} belongs to task {task}, which this instance does not run; ask the instance that runs it"),
                "task": task.to_string(),
                "served_by": self.served_by(),
            }),
            retry_after: false,
        }
    }

    fn range(&self, store: &str, query: &str) -> Answer {
        let (name, info) = match self.store(store) {
            Ok(found) => found,
            Err(answer) => return answer,
        };
        let mut bounds: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (param, encoded) = pair.split_once('=').unwrap_or((pair, ""));
            if param != "from" && param != "to" {
                return Answer::error(400, format!("unknown parameter {param:?}; use from and to"));
            }
            if encoded.is_empty() {
                continue;
            }
            let bytes = percent_decode(encoded)
                .map_err(|e| format!("{param}: {e}"))
                .and_then(|text| {
                    key_bytes(info.key_type, &text).map_err(|e| format!("{param} {text:?}: {e}"))
                });
            match bytes {
                Ok(bytes) => {
                    bounds.insert(param, bytes);
                }
                Err(e) => return Answer::error(400, e),
            }
        }
        let (from, to) = (bounds.remove("from"), bounds.remove("to"));
        if let (Some(f), Some(t)) = (&from, &to)
            && f > t
        {
            return Answer::error(400, "from is after to (in the store's key order)");
        }
        let merged = match self.bus.ask(&name, KvRead::Range { from, to }, None) {
            Ok(merged) => merged,
            Err(e) => return Answer::error(503, e.to_string()),
        };
        let entries: Vec<Value> = merged
            .entries
            .iter()
            .map(|(k, v)| json!({ "key": render(info.key_type, k), "value": render(info.value_type, v) }))
            .collect();
        let tasks = |set: &std::collections::BTreeSet<TaskId>| -> Vec<String> {
            set.iter().map(TaskId::to_string).collect()
        };
        Answer::ok(json!({
            "store": name,
            "entries": entries,
            "tasks": tasks(&merged.running),
            "restoring": tasks(&merged.restoring),
            "served_by": self.served_by(),
        }))
    }
}

/// Decodes `%XX` escapes once; the result must be UTF-8.
pub(crate) fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("malformed percent-escape at byte {i} of {text:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} does not decode to UTF-8"))
}

/// The serialized key of type `key_type` written as `text`.
fn key_bytes(key_type: &str, text: &str) -> Result<Vec<u8>, String> {
    fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
        text.parse()
            .map_err(|_| "not a number of the store's key type".to_string())
    }
    Ok(match key_type {
        "String" => text.as_bytes().to_vec(),
        "i64" => number::<i64>(text)?.to_be_bytes().to_vec(),
        "i32" => number::<i32>(text)?.to_be_bytes().to_vec(),
        "u64" => number::<u64>(text)?.to_be_bytes().to_vec(),
        "u32" => number::<u32>(text)?.to_be_bytes().to_vec(),
        "f64" => number::<f64>(text)?.to_be_bytes().to_vec(),
        _ => {
            let value: Value = serde_json::from_str(text)
                .map_err(|e| format!("a {key_type} key is given as JSON: {e}"))?;
            serde_json::to_vec(&value).expect("a JSON value serializes")
        }
    })
}

/// `bytes` of type `type_name` as JSON; see the module docs.
fn render(type_name: &str, bytes: &[u8]) -> Value {
    fn fixed<const N: usize>(bytes: &[u8]) -> Option<[u8; N]> {
        bytes.try_into().ok()
    }
    let rendered = match type_name {
        "String" => std::str::from_utf8(bytes).ok().map(Value::from),
        "i64" => fixed(bytes).map(|b| Value::from(i64::from_be_bytes(b))),
        "i32" => fixed(bytes).map(|b| Value::from(i32::from_be_bytes(b))),
        "u64" => fixed(bytes).map(|b| Value::from(u64::from_be_bytes(b))),
        "u32" => fixed(bytes).map(|b| Value::from(u32::from_be_bytes(b))),
        "f64" => fixed(bytes).map(|b| Value::from(f64::from_be_bytes(b))),
        "Vec<u8>" => Some(Value::from(base64(bytes))),
        _ => serde_json::from_slice(bytes)
            .ok()
            .or_else(|| std::str::from_utf8(bytes).ok().map(Value::from)),
    };
    rendered.unwrap_or_else(|| Value::from(base64(bytes)))
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_percent_decoded_once() {
        assert_eq!(percent_decode("a%2Fb%25c%3F%23%20d").unwrap(), "a/b%c?# d");
        assert_eq!(percent_decode("%252F").unwrap(), "%2F");
        assert_eq!(percent_decode("caf%C3%A9").unwrap(), "café");
        assert!(percent_decode("%G1").is_err());
        assert!(percent_decode("%2").is_err());
        assert!(percent_decode("%FF").is_err(), "not UTF-8");
    }

    #[test]
    fn values_render_by_their_type() {
        assert_eq!(render("i64", &42i64.to_be_bytes()), json!(42));
        assert_eq!(render("String", b"word"), json!("word"));
        assert_eq!(render("Value", br#"{"a":1}"#), json!({"a": 1}));
        assert_eq!(render("Vec<u8>", b"\x00\xff\x10"), json!("AP8Q"));
        assert_eq!(
            render("i64", b"abc"),
            json!("YWJj"),
            "a wrong width is base64"
        );
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"a"), "YQ==");
    }

    #[test]
    fn keys_parse_by_their_type() {
        assert_eq!(key_bytes("String", "a/b").unwrap(), b"a/b");
        assert_eq!(key_bytes("i64", "-1").unwrap(), (-1i64).to_be_bytes());
        assert!(key_bytes("i64", "x").is_err());
        assert_eq!(key_bytes("Order", r#"{"id": 7}"#).unwrap(), br#"{"id":7}"#);
        assert!(key_bytes("Order", "{").is_err());
    }
}
