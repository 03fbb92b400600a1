//! The instance's HTTP server: metrics, health and the topology.
//!
//! Started by [`crate::runtime::KafkaStreams::start`] when
//! [`crate::config::StreamsConfig::http_bind`] is set (the `weir run` default is
//! `127.0.0.1:9190`; port 0 picks a free port, see
//! [`crate::runtime::KafkaStreams::http_addr`]). It runs on its own thread
//! with its own single-threaded tokio runtime, never on a stream thread, and
//! stops when the instance closes.
//!
//! | path | answer |
//! | --- | --- |
//! | `GET /metrics` | every series of [`crate::metrics::Metrics`], Prometheus text format 0.0.4 |
//! | `GET /health/live` | 200 unless the instance failed (`PendingError`/`Error`: 503) |
//! | `GET /health/ready` | 200 only when the state is `Running` and no task is restoring; else 503. Body: `{"ready":…,"state":…,"restoring_tasks":…}` |
//! | `GET /topology` | the topology description (`?format=mermaid` for Mermaid, `?format=json` for JSON) |
//! | `GET /scaling` | the scaling recommendation and its inputs ([`crate::metrics::scaling`]); 503 before the first window |
//! | `GET /live` | rates per processor node, drops per sub-topology, lag per partition over the last 2 s ([`crate::metrics::live`]), the state and the scaling answer; 503 before the first interval |
//! | `GET /ui` (and `/`) | the live page: the topology as a graph with those figures, refreshed every 2 s; self-contained (no assets from elsewhere) |
//!
//! The server speaks just enough HTTP/1.1 for probes and scrapers: one
//! request per connection (`Connection: close`), `GET` and `HEAD`, request
//! heads up to 16 KiB read within 5 s.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::metrics::Metrics;
use crate::runtime::{AppState, StateCell};

const MAX_HEAD: usize = 16 * 1024;
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The live page (`GET /ui`): HTML, CSS and script in one file.
const LIVE_PAGE: &str = include_str!("ui/live.html");

/// What the endpoints read.
pub(crate) struct Endpoints {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) state: Arc<StateCell>,
    pub(crate) topology_text: String,
    pub(crate) topology_mermaid: String,
    pub(crate) topology_json: String,
    /// Interactive queries (`/stores`).
    pub(crate) stores: Arc<crate::runtime::StoreService>,
    /// The scaling signal (`/scaling`).
    pub(crate) scaling: Arc<crate::metrics::scaling::ScalingView>,
}

/// A running server; dropping it stops the server and joins its thread.
pub(crate) struct HttpServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Binds `bind` and serves `endpoints` on a new thread.
    pub(crate) fn start(bind: SocketAddr, endpoints: Endpoints) -> io::Result<HttpServer> {
        let listener = std::net::TcpListener::bind(bind).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "binding the HTTP server to {bind}: {e}; set http_bind to a free ip:port, port 0 for any, or off"
                ),
            )
        })?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, stopped) = oneshot::channel();
        let endpoints = Arc::new(endpoints);
        let thread = std::thread::Builder::new()
            .name("weir-http".into())
            .spawn(move || {
                runtime.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => serve(listener, endpoints, stopped).await,
                        Err(e) => tracing::error!(error = %e, "HTTP server failed to start"),
                    }
                })
            })?;
        tracing::info!(%addr, "HTTP server listening (/ui, /metrics, /health/live, /health/ready, /topology, /scaling, /live, /stores)");
        Ok(HttpServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address actually bound.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    endpoints: Arc<Endpoints>,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(stream, endpoints.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

async fn connection(mut stream: tokio::net::TcpStream, endpoints: Arc<Endpoints>) {
    let mut head = Vec::with_capacity(1024);
    let read = tokio::time::timeout(READ_TIMEOUT, async {
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Ok::<bool, io::Error>(false);
            }
            head.extend_from_slice(&buf[..n]);
            if head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(true);
            }
            if head.len() > MAX_HEAD {
                return Ok(false);
            }
        }
    })
    .await;
    let response = match read {
        Ok(Ok(true)) if store_target(&head).is_some() => {
            let (path, query) = store_target(&head).expect("checked");
            let stores = endpoints.stores.clone();
            // Queries wait for the stream threads: off the server's thread.
            match tokio::task::spawn_blocking(move || stores.answer(&path, &query)).await {
                Ok(answer) => Response::json_answer(answer),
                Err(_) => Response::text(500, "the query failed\n".into()),
            }
        }
        Ok(Ok(true)) => respond(&endpoints, &head),
        Ok(Ok(false)) if head.len() > MAX_HEAD => {
            Response::text(431, "request head too large\n".into())
        }
        _ => return,
    };
    let head_only = head.starts_with(b"HEAD ");
    let _ = stream.write_all(&response.encode(head_only)).await;
    let _ = stream.shutdown().await;
}

/// `(path, query)` of a `GET` under `/stores`.
fn store_target(head: &[u8]) -> Option<(String, String)> {
    let line = head.split(|&b| b == b'\r').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    let (method, target) = (parts.next()?, parts.next()?);
    if method != "GET" && method != "HEAD" {
        return None;
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    (path == "/stores" || path.starts_with("/stores/") || path == "/instances")
        .then(|| (path.to_string(), query.to_string()))
}

struct Response {
    status: u16,
    content_type: &'static str,
    body: String,
    retry_after: bool,
}

impl Response {
    fn text(status: u16, body: String) -> Self {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body,
            retry_after: false,
        }
    }

    fn json(status: u16, body: String) -> Self {
        Response {
            status,
            content_type: "application/json",
            body,
            retry_after: status == 503,
        }
    }

    fn json_answer(answer: crate::runtime::StoreAnswer) -> Self {
        Response {
            status: answer.status,
            content_type: "application/json",
            body: format!("{}\n", answer.body),
            retry_after: answer.retry_after,
        }
    }

    fn encode(&self, head_only: bool) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            431 => "Request Header Fields Too Large",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            _ => "",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len(),
            if self.retry_after { "Retry-After: 1\r\n" } else { "" }
        )
        .into_bytes();
        if !head_only {
            out.extend_from_slice(self.body.as_bytes());
        }
        out
    }
}

fn respond(endpoints: &Endpoints, head: &[u8]) -> Response {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Response::text(400, "malformed request line\n".into());
    };
    if method != "GET" && method != "HEAD" {
        return Response::text(405, format!("{method} is not supported; use GET\n"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    match path {
        "/metrics" => Response {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: endpoints.metrics.encode_text(),
            retry_after: false,
        },
        "/health/live" => {
            let state = endpoints.state.get();
            let live = !matches!(state, AppState::PendingError | AppState::Error);
            Response {
                status: if live { 200 } else { 503 },
                content_type: "application/json",
                body: format!("{{\"live\":{live},\"state\":\"{state:?}\"}}\n"),
                retry_after: false,
            }
        }
        "/health/ready" => {
            let state = endpoints.state.get();
            let restoring = endpoints.metrics.restoring_tasks();
            let ready = state == AppState::Running && restoring == 0;
            Response {
                status: if ready { 200 } else { 503 },
                content_type: "application/json",
                body: format!(
                    "{{\"ready\":{ready},\"state\":\"{state:?}\",\"restoring_tasks\":{restoring}}}\n"
                ),
                retry_after: false,
            }
        }
        "/topology" if query.split('&').any(|q| q == "format=mermaid") => {
            Response::text(200, endpoints.topology_mermaid.clone())
        }
        "/topology" if query.split('&').any(|q| q == "format=json") => {
            Response::json(200, endpoints.topology_json.clone())
        }
        "/" | "/ui" => Response {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body: LIVE_PAGE.to_string(),
            retry_after: false,
        },
        "/live" => {
            let state = endpoints.state.get();
            match endpoints.scaling.live() {
                Some(mut body) => {
                    body["state"] = serde_json::json!(format!("{state:?}"));
                    body["scaling"] = endpoints.scaling.latest().unwrap_or_default();
                    Response::json(200, format!("{body}\n"))
                }
                None => Response::json(
                    503,
                    format!("{{\"state\":\"{state:?}\",\"reason\":\"the first live interval has not passed\"}}\n"),
                ),
            }
        }
        "/topology" => Response::text(200, endpoints.topology_text.clone()),
        "/scaling" => match endpoints.scaling.latest() {
            Some(body) => Response::json(200, format!("{body}\n")),
            None => Response::json(
                503,
                "{\"recommended_instances\":null,\"reason\":\"the first scaling window (scaling_window_ms) has not passed\"}\n".into(),
            ),
        },
        _ => Response::text(
            404,
            format!(
                "no such path {path}; try /ui, /metrics, /health/live, /health/ready, /topology, /scaling, /live, /stores\n"
            ),
        ),
    }
}
