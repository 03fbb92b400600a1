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
//! base64. Answers name the instance (`served_by`, its advertised
//! endpoint) and the task.
//!
//! **Routing.** A key whose task runs on another instance is forwarded
//! once to that instance (found from the group description,
//! `query_route.rs`), marked `forwarded=1` so it is never forwarded again;
//! the owner's answer is returned as it is. A range asks every instance
//! for its own tasks' entries (`local=1`) and merges them; it is a 503
//! unless every task of the store answered, so the table comes back
//! whole and each key once. A task that restores or moves, or an
//! application that is not running, is a 503 with `Retry-After`.
//! `GET /instances` lists the instances, endpoints and tasks.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::query::QueryBus;
use super::query_read::StoreRead;
use super::{AppState, Router, StateCell};
use crate::processor::TaskId;
use crate::topology::Topology;

/// One key's request, as the answer needs it.
struct Asked<'a> {
    name: &'a str,
    info: &'a StoreInfo,
    text: &'a str,
    task: TaskId,
    /// Windows or sessions rather than a value.
    windows: bool,
    from: i64,
    to: i64,
}

/// What the server knows of one store.
struct StoreInfo {
    kind: &'static str,
    subtopology: u32,
    key_type: &'static str,
    value_type: &'static str,
    /// Its changelog topic, when logged.
    changelog: Option<String>,
    /// A global table's store: every instance holds all of it.
    global: bool,
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
    router: Arc<Router>,
    standbys: Arc<super::standby::StandbyRegistry>,
    state: Arc<StateCell>,
    stores: BTreeMap<String, StoreInfo>,
    /// This instance's advertised endpoint, named in answers (set once
    /// the server is bound).
    served_by: std::sync::OnceLock<String>,
    /// The address the server bound.
    bound: std::sync::OnceLock<String>,
    /// The loaded global tables (set once loaded, at start).
    globals: std::sync::OnceLock<crate::topology::GlobalStores>,
}

impl StoreService {
    pub(crate) fn new(
        bus: Arc<QueryBus>,
        router: Arc<Router>,
        standbys: Arc<super::standby::StandbyRegistry>,
        state: Arc<StateCell>,
        topology: &Topology,
        application_id: &str,
    ) -> Self {
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
                        changelog: def.logging.then(|| def.changelog_topic(application_id)),
                        global: false,
                    },
                );
            }
        }
        for global in &topology.globals {
            stores.insert(
                global.store.clone(),
                StoreInfo {
                    kind: "key-value",
                    subtopology: 0,
                    // Global tables declare no serdes: keys are their text,
                    // values render as JSON, text or base64.
                    key_type: "bytes as text",
                    value_type: "unknown",
                    changelog: None,
                    global: true,
                },
            );
        }
        StoreService {
            bus,
            router,
            standbys,
            state,
            stores,
            served_by: std::sync::OnceLock::new(),
            bound: std::sync::OnceLock::new(),
            globals: std::sync::OnceLock::new(),
        }
    }

    /// Hands over the loaded global tables.
    pub(crate) fn set_globals(&self, globals: crate::topology::GlobalStores) {
        let _ = self.globals.set(globals);
    }

    /// The loaded global store `name`.
    fn global(&self, name: &str) -> Result<Arc<crate::topology::GlobalStore>, Answer> {
        self.globals
            .get()
            .and_then(|g| g.get(name))
            .cloned()
            .ok_or_else(|| Answer::error(503, "the global tables are not loaded yet"))
    }

    /// Records the bound address and the advertised endpoint (named in
    /// answers as `served_by`).
    pub(crate) fn set_served_by(&self, bound: String, advertised: String) {
        let _ = self.bound.set(bound);
        let _ = self.served_by.set(advertised);
    }

    /// Whether `endpoint` is this instance.
    fn is_me(&self, endpoint: &str) -> bool {
        Some(endpoint) == self.served_by.get().map(String::as_str)
            || Some(endpoint) == self.bound.get().map(String::as_str)
    }

    fn served_by(&self) -> &str {
        self.served_by.get().map_or("", String::as_str)
    }

    /// Answers `GET {path}?{query}` for a path under `/stores`.
    pub(crate) fn answer(&self, path: &str, query: &str) -> Answer {
        if path == "/instances" {
            return self.instances();
        }
        let segments: Vec<&str> = path
            .trim_start_matches('/')
            .split('/')
            .skip(1) // "stores"
            .collect();
        let flag = |name: &str| query.split('&').any(|p| p == format!("{name}=1"));
        let query: String = query
            .split('&')
            .filter(|p| !["forwarded=1", "local=1", "stale=1"].contains(p))
            .collect::<Vec<_>>()
            .join("&");
        match segments.as_slice() {
            [] | [""] => self.list(),
            [store, "keys", key] => {
                self.one_key(store, key, None, &query, flag("forwarded"), flag("stale"))
            }
            [store, "keys", key, "windows"] => self.one_key(
                store,
                key,
                Some(()),
                &query,
                flag("forwarded"),
                flag("stale"),
            ),
            [store, "range"] if flag("local") => self.range(store, &query),
            [store, "range"] => self.range_everywhere(store, &query),
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
                    "kind": if info.global { "global key-value" } else { info.kind },
                    "key_type": info.key_type,
                    "value_type": info.value_type,
                })
            })
            .collect();
        Answer::ok(json!({ "stores": stores, "served_by": self.served_by() }))
    }

    /// The store named by an (encoded) path segment, if it is a key-value
    /// store.
    fn store(&self, encoded: &str, kinds: &[&str]) -> Result<(String, &StoreInfo), Answer> {
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
        if !kinds.contains(&info.kind) {
            let how = match info.kind {
                "key-value" => format!("/stores/{name}/keys/{{key}} or /stores/{name}/range"),
                _ => format!("/stores/{name}/keys/{{key}}/windows?from=&to="),
            };
            return Err(Answer::error(
                400,
                format!("store {name:?} is a {} store; ask {how}", info.kind),
            ));
        }
        Ok((name, info))
    }

    fn instances(&self) -> Answer {
        match self.router.instances() {
            Ok(instances) => Answer::ok(json!({
                "instances": instances.iter().map(|i| json!({
                    "process_id": i.process_id,
                    "endpoint": i.endpoint,
                    "tasks": i.tasks.iter().map(TaskId::to_string).collect::<Vec<_>>(),
                    "standby_tasks": i.standby_tasks.iter().map(TaskId::to_string).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
                "served_by": self.served_by(),
            })),
            Err(e) => Answer::error(503, format!("describing the group: {e}")),
        }
    }

    /// A key's value (`windows` = `None`), or its windows or sessions
    /// between the `from`/`to` of `query`: from this instance when it runs
    /// the key's task, else forwarded once to the instance that does.
    fn one_key(
        &self,
        store: &str,
        encoded_key: &str,
        windows: Option<()>,
        query: &str,
        forwarded: bool,
        stale: bool,
    ) -> Answer {
        let kinds: &[&str] = if windows.is_some() {
            &["window", "session"]
        } else {
            &["key-value"]
        };
        let (name, info) = match self.store(store, kinds) {
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
        if info.global {
            // Every instance holds the whole global table: no routing.
            let value = match self.global(&name).map(|g| g.get(&key)) {
                Ok(Ok(value)) => value,
                Ok(Err(e)) => return Answer::error(503, format!("reading {name:?}: {e}")),
                Err(answer) => return answer,
            };
            return match value {
                Some(v) => Answer::ok(json!({
                    "store": name,
                    "key": text,
                    "value": render(info.value_type, &v),
                    "global": true,
                    "served_by": self.served_by(),
                })),
                None => Answer::error(404, format!("key {text:?} is not in global store {name:?}")),
            };
        }
        let (from, to) = match windows.map(|()| time_bounds(query)) {
            None => (i64::MIN, i64::MAX),
            Some(Ok(bounds)) => bounds,
            Some(Err(e)) => return Answer::error(400, e),
        };
        let read = match (windows, info.kind) {
            (None, _) => StoreRead::Get(key.clone()),
            (Some(()), "window") => StoreRead::WindowFetch {
                key: key.clone(),
                from,
                to,
            },
            (Some(()), _) => StoreRead::SessionFetch(key.clone()),
        };
        let Some(task) = self.bus.task_of(info.subtopology, &key) else {
            return Answer::error(503, "the application has not started");
        };
        let asked = Asked {
            name: &name,
            info,
            text: &text,
            task,
            windows: windows.is_some(),
            from,
            to,
        };
        let merged = match self.bus.ask(&name, read.clone(), Some(task)) {
            Ok(merged) => merged,
            Err(e) => return Answer::error(503, e.to_string()),
        };
        if merged.running.contains(&task) {
            return self.found(&asked, merged.entries, merged.windows, None);
        }
        // Not answerable here from the active task.
        // A standby copy here answers a stale request, unless it cannot
        // tell (still catching up): then the owner or another copy may.
        if stale
            && let Some(answer) = self.standby_answer(&asked, &read)
            && answer.status != 503
        {
            return answer;
        }
        if merged.restoring.contains(&task) {
            return Answer::error(503, format!("task {task} is restoring"));
        }
        let state = self.state.get();
        if state != AppState::Running {
            return Answer::error(503, format!("the application is {state:?}"));
        }
        if forwarded {
            return Answer::error(
                503,
                format!(
                    "task {task} moved away from this instance while the request was forwarded here"
                ),
            );
        }
        let rest = if windows.is_some() { "/windows" } else { "" };
        let mut flags = vec!["forwarded=1"];
        if stale {
            flags.push("stale=1");
        }
        let separator = if query.is_empty() { "" } else { "&" };
        let path = format!(
            "/stores/{}/keys/{encoded_key}{rest}?{query}{separator}{}",
            percent_encode(&name),
            flags.join("&")
        );
        let answer = self.forward(&name, &text, &path, task);
        if answer.status != 503 || !stale {
            return answer;
        }
        // The owner cannot answer: a standby copy elsewhere may.
        let standbys: Vec<String> = match self.router.instances() {
            Ok(instances) => instances
                .iter()
                .filter(|i| i.standby_tasks.contains(&task))
                .filter_map(|i| i.endpoint.clone())
                .filter(|e| !self.is_me(e))
                .collect(),
            Err(_) => Vec::new(),
        };
        for endpoint in standbys {
            if let Ok((status @ (200 | 404), body)) = http_get(&endpoint, &path)
                && let Ok(body) = serde_json::from_str(&body)
            {
                return Answer {
                    status,
                    body,
                    retry_after: false,
                };
            }
        }
        answer
    }

    /// The answer for what a store gave: a key's value or its windows;
    /// `lag` when it comes from a standby copy.
    fn found(
        &self,
        asked: &Asked<'_>,
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        windows: Vec<super::query_read::WindowEntry>,
        lag: Option<Option<i64>>,
    ) -> Answer {
        let Asked {
            name,
            info,
            text,
            task,
            from,
            to,
            ..
        } = *asked;
        let mut body = if asked.windows {
            let windows: Vec<Value> = windows
                .iter()
                // Sessions overlapping from..=to.
                .filter(|(_, start, end, _)| end.unwrap_or(*start) >= from && *start <= to)
                .map(|(_, start, end, v)| match end {
                    Some(end) => {
                        json!({ "start": start, "end": end, "value": render(info.value_type, v) })
                    }
                    None => json!({ "start": start, "value": render(info.value_type, v) }),
                })
                .collect();
            json!({ "store": name, "key": text, "windows": windows })
        } else {
            match entries.into_iter().next() {
                Some((_, value)) => {
                    json!({ "store": name, "key": text, "value": render(info.value_type, &value) })
                }
                None => {
                    // A standby copy still catching up cannot say a key is
                    // absent: the key may come later in the changelog.
                    // Caught up means at most the closing transaction
                    // marker behind.
                    if let Some(lag) = lag
                        && lag.is_none_or(|l| l > 1)
                    {
                        let mut answer = Answer::error(
                            503,
                            format!(
                                "key {text:?} is not in the standby copy of task {task}, which is behind the changelog ({lag:?} offsets)"
                            ),
                        );
                        answer.body["standby"] = json!(true);
                        answer.body["lag_records"] = json!(lag);
                        return answer;
                    }
                    let mut answer = Answer::error(
                        404,
                        format!("key {text:?} is not in store {name:?} (task {task})"),
                    );
                    if let Some(lag) = lag {
                        answer.body["standby"] = json!(true);
                        answer.body["lag_records"] = json!(lag);
                    }
                    return answer;
                }
            }
        };
        body["task"] = json!(task.to_string());
        body["served_by"] = json!(self.served_by());
        if let Some(lag) = lag {
            body["standby"] = json!(true);
            body["lag_records"] = json!(lag);
        }
        Answer::ok(body)
    }

    /// The answer from this instance's standby copy of the key's task, if
    /// it keeps one, with its lag behind the changelog's end.
    fn standby_answer(&self, asked: &Asked<'_>, read: &StoreRead) -> Option<Answer> {
        let (found, applied) = self.standbys.read(asked.task, asked.name, read)?;
        let found = match found {
            Ok(found) => found,
            Err(e) => return Some(Answer::error(503, format!("reading the standby copy: {e}"))),
        };
        let lag = asked.info.changelog.as_deref().and_then(|topic| {
            self.router
                .standby_lag(topic, asked.task.partition, applied)
        });
        Some(self.found(asked, found.entries, found.windows, Some(lag)))
    }

    /// Asks the instance that runs `task` (once).
    fn forward(&self, store: &str, key: &str, path: &str, task: TaskId) -> Answer {
        let owner = match self.router.owner(task) {
            Ok(owner) => owner,
            Err(e) => return Answer::error(503, format!("describing the group: {e}")),
        };
        let Some(owner) = owner else {
            return Answer::error(
                503,
                format!("task {task} is moving (no instance runs it now)"),
            );
        };
        let Some(endpoint) = owner.endpoint.filter(|e| !self.is_me(e)) else {
            self.router.invalidate();
            return Answer::error(
                503,
                format!(
                    "key {key:?} of store {store:?} belongs to task {task} of instance {}, which advertises no other endpoint",
                    owner.process_id
                ),
            );
        };
        match http_get(&endpoint, path) {
            Ok((status, body)) => {
                if status == 503 {
                    // The owner moved on: read the group afresh next time.
                    self.router.invalidate();
                }
                Answer {
                    status,
                    retry_after: status == 503,
                    body: serde_json::from_str(&body).unwrap_or_else(|_| json!({ "error": body })),
                }
            }
            Err(e) => {
                self.router.invalidate();
                Answer::error(503, format!("forwarding to {endpoint} (task {task}): {e}"))
            }
        }
    }

    /// A range over every instance's tasks; see the module docs.
    fn range_everywhere(&self, store: &str, query: &str) -> Answer {
        let (name, info) = match self.store(store, &["key-value"]) {
            Ok(found) => found,
            Err(answer) => return answer,
        };
        if info.global {
            return self.range(store, query);
        }
        let local = self.range(store, query);
        if local.status != 200 {
            return local;
        }
        let instances = match self.router.instances() {
            Ok(instances) => instances,
            Err(e) => return Answer::error(503, format!("describing the group: {e}")),
        };
        let mut answers = vec![local.body];
        let mut served_by = vec![self.served_by().to_string()];
        for endpoint in instances.iter().filter_map(|i| i.endpoint.as_deref()) {
            if self.is_me(endpoint) {
                continue;
            }
            let separator = if query.is_empty() { "" } else { "&" };
            let path = format!(
                "/stores/{}/range?{query}{separator}local=1",
                percent_encode(&name)
            );
            match http_get(endpoint, &path) {
                Ok((200, body)) => match serde_json::from_str::<Value>(&body) {
                    Ok(answer) => {
                        answers.push(answer);
                        served_by.push(endpoint.to_string());
                    }
                    Err(e) => return Answer::error(503, format!("{endpoint} answered {e}")),
                },
                Ok((status, body)) => {
                    return Answer::error(503, format!("{endpoint} answered {status}: {body}"));
                }
                Err(e) => {
                    self.router.invalidate();
                    return Answer::error(503, format!("asking {endpoint}: {e}"));
                }
            }
        }
        let mut tasks = std::collections::BTreeSet::new();
        let mut entries: Vec<Value> = Vec::new();
        for answer in &answers {
            for task in answer["tasks"].as_array().into_iter().flatten() {
                tasks.insert(task.as_str().unwrap_or_default().to_string());
            }
            entries.extend(answer["entries"].as_array().into_iter().flatten().cloned());
        }
        let partitions = self.bus.partitions(info.subtopology).unwrap_or(0);
        let missing: Vec<String> = (0..partitions)
            .map(|p| {
                TaskId {
                    subtopology: info.subtopology,
                    partition: p,
                }
                .to_string()
            })
            .filter(|t| !tasks.contains(t))
            .collect();
        if !missing.is_empty() {
            return Answer::error(
                503,
                format!("tasks {missing:?} of store {name:?} did not answer (restoring or moving)"),
            );
        }
        entries.sort_by(|a, b| compare_keys(&a["key"], &b["key"]));
        Answer::ok(json!({
            "store": name,
            "entries": entries,
            "tasks": tasks,
            "served_by": served_by,
        }))
    }

    fn range(&self, store: &str, query: &str) -> Answer {
        let (name, info) = match self.store(store, &["key-value"]) {
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
        if info.global {
            let entries = match self
                .global(&name)
                .map(|g| g.range(from.as_deref(), to.as_deref()))
            {
                Ok(Ok(entries)) => entries,
                Ok(Err(e)) => return Answer::error(503, format!("reading {name:?}: {e}")),
                Err(answer) => return answer,
            };
            let entries: Vec<Value> = entries
                .iter()
                .map(|(k, v)| json!({ "key": render(info.key_type, k), "value": render(info.value_type, v) }))
                .collect();
            return Answer::ok(json!({
                "store": name,
                "entries": entries,
                "global": true,
                "served_by": self.served_by(),
            }));
        }
        let merged = match self.bus.ask(&name, StoreRead::Range { from, to }, None) {
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

/// Asks a running instance of `application_id` (found through the group
/// on the cluster `connection` names) for `path` (`/stores/...`): the
/// endpoint that answered, the status and the JSON body. Instances are
/// tried in turn until one answers; an error says why none did. This is
/// `weir query`.
pub fn query_application(
    connection: &crate::config::Connection,
    application_id: &str,
    path: &str,
) -> Result<(String, u16, String), String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let bootstrap = &connection.bootstrap_servers;
    let client: BaseConsumer = connection
        .client_config()
        .create()
        .map_err(|e| format!("creating the metadata client: {e}"))?;
    let members = super::group_describe::describe_group(
        client.client(),
        application_id,
        std::time::Duration::from_secs(30),
    )
    .map_err(|e| format!("describing consumer group '{application_id}' at {bootstrap}: {e}"))?;
    let mut endpoints: Vec<String> = members
        .iter()
        .filter_map(|m| super::group_describe::parse_client_id(&m.client_id, application_id))
        .filter_map(|(_, endpoint)| endpoint.map(str::to_string))
        .collect();
    endpoints.sort();
    endpoints.dedup();
    if endpoints.is_empty() {
        return Err(format!(
            "no running instance of '{application_id}' advertises an endpoint (is it running, with its HTTP server on?)"
        ));
    }
    let mut failures = Vec::new();
    for endpoint in endpoints {
        match http_get(&endpoint, path) {
            Ok((status, body)) => return Ok((endpoint, status, body)),
            Err(e) => failures.push(format!("{endpoint}: {e}")),
        }
    }
    Err(format!("no instance answered: {}", failures.join("; ")))
}

/// The URL path `weir query` asks: a key (`/stores/{store}/keys/{key}`),
/// its windows (`.../windows?from=&to=`), or the whole store
/// (`/stores/{store}/range`) without a key.
pub fn query_path(
    store: &str,
    key: Option<&str>,
    windows: bool,
    from: Option<i64>,
    to: Option<i64>,
) -> String {
    let mut path = format!("/stores/{}", percent_encode(store));
    match key {
        None => path.push_str("/range"),
        Some(key) => {
            path.push_str("/keys/");
            path.push_str(&percent_encode(key));
            if windows {
                path.push_str("/windows");
                let bounds: Vec<String> = [("from", from), ("to", to)]
                    .iter()
                    .filter_map(|(name, v)| v.map(|v| format!("{name}={v}")))
                    .collect();
                if !bounds.is_empty() {
                    path.push('?');
                    path.push_str(&bounds.join("&"));
                }
            }
        }
    }
    path
}

/// The `from` and `to` (ms) of a windows query; unbounded when absent.
fn time_bounds(query: &str) -> Result<(i64, i64), String> {
    let (mut from, mut to) = (i64::MIN, i64::MAX);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (param, value) = pair.split_once('=').unwrap_or((pair, ""));
        let parse = || {
            value
                .parse::<i64>()
                .map_err(|_| format!("{param}={value:?} is not a time in ms since the epoch"))
        };
        match param {
            "from" => from = parse()?,
            "to" => to = parse()?,
            _ => return Err(format!("unknown parameter {param:?}; use from and to")),
        }
    }
    if from > to {
        return Err(format!("from ({from}) is after to ({to})"));
    }
    Ok((from, to))
}

/// Orders rendered keys: numbers by value, anything else by its text.
fn compare_keys(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        _ => match (a.as_str(), b.as_str()) {
            (Some(x), Some(y)) => x.cmp(y),
            _ => a.to_string().cmp(&b.to_string()),
        },
    }
}

/// Percent-encodes every byte but unreserved ASCII.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// How long a forwarded request may take.
const FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `GET path` of the HTTP server at `endpoint` (`host:port`): status and
/// body.
fn http_get(endpoint: &str, path: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    let addr = endpoint
        .to_socket_addrs()
        .map_err(|e| format!("resolving {endpoint}: {e}"))?
        .next()
        .ok_or_else(|| format!("{endpoint} resolves to no address"))?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, FORWARD_TIMEOUT)
        .map_err(|e| format!("connecting: {e}"))?;
    stream
        .set_read_timeout(Some(FORWARD_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(FORWARD_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {endpoint}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("sending: {e}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| format!("reading: {e}"))?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or("a response without a head")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("a response without a status")?;
    Ok((status, body.to_string()))
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
        "String" | "bytes as text" => text.as_bytes().to_vec(),
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
    fn query_paths_encode_the_key_once() {
        assert_eq!(
            query_path("counts", Some("a/b c"), false, None, None),
            "/stores/counts/keys/a%2Fb%20c"
        );
        assert_eq!(
            query_path("w", Some("/home"), true, Some(5), None),
            "/stores/w/keys/%2Fhome/windows?from=5"
        );
        assert_eq!(
            query_path("counts", None, false, None, None),
            "/stores/counts/range"
        );
        let key = "a/b%c?# é";
        let path = query_path("s", Some(key), false, None, None);
        let segment = path.rsplit('/').next().unwrap();
        assert_eq!(percent_decode(segment).unwrap(), key);
    }

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
