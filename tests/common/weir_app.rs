//! Running `weir run <topology>` as child processes: the way users deploy
//! it, so tests can start, SIGTERM and SIGKILL real instances.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One `weir run` child process with its own state directory and log file.
pub struct WeirApp {
    child: Option<Child>,
    /// Its log file (stderr).
    pub log: PathBuf,
    /// Its state directory.
    pub state_dir: PathBuf,
}

impl WeirApp {
    /// Starts `weir run <topology>` with `settings` (`key=value`) against the
    /// harness broker, its state in `state_dir`, logging to `log`.
    pub fn start(topology: &str, state_dir: &Path, log: &Path, settings: &[String]) -> WeirApp {
        std::fs::create_dir_all(state_dir).expect("creating the state dir");
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("opening the log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.arg("run")
            .arg(topology)
            .arg("--set")
            .arg(format!("bootstrap_servers={}", super::bootstrap()))
            .arg("--set")
            .arg(format!("state_dir={}", state_dir.display()))
            // Many children run at once: each HTTP server on a free port.
            .arg("--set")
            .arg("http_bind=127.0.0.1:0");
        // The whole suite runs under either group protocol (`.ci/run` runs
        // the crash suite again under classic); a test's own setting wins.
        if let Ok(protocol) = std::env::var("WEIR_TEST_GROUP_PROTOCOL") {
            cmd.arg("--set").arg(format!("group_protocol={protocol}"));
        }
        for s in settings {
            cmd.arg("--set").arg(s);
        }
        cmd.env(
            "WEIR_LOG",
            std::env::var("WEIR_TEST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .env_remove("WEIR_BOOTSTRAP_SERVERS")
        .env_remove("WEIR_TEST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log_file));
        let child = cmd.spawn().expect("starting weir run");
        WeirApp {
            child: Some(child),
            log: log.to_path_buf(),
            state_dir: state_dir.to_path_buf(),
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// Kills the process with SIGKILL (no commit, no cleanup) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and waits up to `timeout`: `Some(exit code)`, or
    /// `None` when it did not stop (it is then killed).
    pub fn try_stop(&mut self, timeout: Duration) -> Option<Option<i32>> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Some(status) = child.try_wait().expect("waiting for weir") {
                return Some(status.code());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// Sends SIGTERM and waits for a clean exit; returns the exit status code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        assert!(status.is_ok_and(|s| s.success()), "sending SIGTERM failed");
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(status) = child.try_wait().expect("waiting for weir") {
                return status.code();
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "weir (pid {}) did not stop within 90 s of SIGTERM; log: {}",
                    child.id(),
                    self.log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The exit code once the process has exited by itself (`None` while
    /// it runs or after a signal).
    #[allow(dead_code)]
    pub fn exit_code(&mut self) -> Option<i32> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
            .and_then(|status| status.code())
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => c.try_wait().ok().flatten().is_none(),
            None => false,
        }
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The address of its HTTP server, from the start-up line `weir run`
    /// prints once the application started (`None` before that).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        // The last start's: a restarted instance appends to the same log.
        self.log_text().lines().rev().find_map(|l| {
            l.strip_prefix("weir: metrics at http://")?
                .split_once('/')?
                .0
                .parse()
                .ok()
        })
    }

    /// `GET path` on its HTTP server: the status code and body, or `None`
    /// while the server is not up yet.
    pub fn http_get(&self, path: &str) -> Option<(u16, String)> {
        http_get_at(self.http_addr()?, path)
    }

    /// Whether its `/health/ready` answers 200 (running, nothing restoring).
    pub fn is_ready(&self) -> bool {
        self.http_get("/health/ready")
            .is_some_and(|(status, _)| status == 200)
    }

    /// The sum of every series of the unlabelled or labelled metric `name`
    /// on its `/metrics` (0 when it has none; `None` while the server is
    /// not up).
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metric_with(name, &[])
    }

    /// As [`WeirApp::metric`], over the series whose labels include every
    /// `(label, value)` of `labels`.
    pub fn metric_with(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let (status, body) = self.http_get("/metrics")?;
        if status != 200 {
            return None;
        }
        Some(metric_in(&body, name, labels))
    }
}

/// The sum of metric `name`'s series in the Prometheus text `body` whose
/// labels include every `(label, value)` of `labels` (0 when none does).
pub fn metric_in(body: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let family = series.split('{').next()?;
            let matches = family == name && wanted.iter().all(|w| series.contains(w));
            matches.then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

impl Drop for WeirApp {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `GET path` on the HTTP server at `addr`: the status code and body, or
/// `None` when it does not answer.
pub fn http_get_at(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// `GET path` at `addr` with a JSON body: the status and the body parsed
/// (panics, naming the path, when the server is down or the body is not
/// JSON).
pub fn get_json(addr: SocketAddr, path: &str) -> (u16, serde_json::Value) {
    let (status, body) = http_get_at(addr, path).expect("the server answers HTTP");
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
    (status, json)
}

/// Percent-encodes every byte of `text` but unreserved ASCII (one URL
/// path segment or query value).
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
