//! The application side: `weir run word-count` instances as child
//! processes, each with its own state directory and (appended) log.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};

/// How to start an instance.
pub struct Launch {
    pub weir: PathBuf,
    pub work_dir: PathBuf,
    pub settings: Vec<String>,
}

/// One `weir run` instance.
pub struct Instance {
    pub index: usize,
    child: Option<Child>,
    pub starts: u32,
}

impl Launch {
    pub fn state_dir(&self, index: usize) -> PathBuf {
        self.work_dir.join(format!("instance-{index}"))
    }

    pub fn log(&self, index: usize) -> PathBuf {
        self.work_dir.join(format!("instance-{index}.log"))
    }

    pub fn start(&self, instance: &mut Instance) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(instance.index))
            .context("opening an instance log")?;
        let mut cmd = Command::new(&self.weir);
        cmd.args(["run", "word-count"])
            .arg("--set")
            .arg(format!(
                "state_dir={}",
                self.state_dir(instance.index).display()
            ))
            .arg("--set")
            .arg("http_bind=127.0.0.1:0");
        for s in &self.settings {
            cmd.arg("--set").arg(s);
        }
        let child = cmd
            // CHAOS_WEIR_LOG sets the instances' log filter (for example
            // `info,librdkafka=debug` with `WEIR_CONSUMER.DEBUG=cgrp`).
            .env(
                "WEIR_LOG",
                std::env::var("CHAOS_WEIR_LOG").unwrap_or_else(|_| "info".to_string()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("starting {}", self.weir.display()))?;
        instance.child = Some(child);
        instance.starts += 1;
        Ok(())
    }

    /// The transactional id of `instance`'s first stream thread
    /// (`<application_id>-<process id>-0`; the process id is kept in its
    /// state directory).
    pub fn transactional_id(&self, application_id: &str, index: usize) -> Option<String> {
        let id = std::fs::read_to_string(
            self.state_dir(index)
                .join(application_id)
                .join("process.id"),
        )
        .ok()?;
        Some(format!("{application_id}-{}-0", id.trim()))
    }
}

impl Instance {
    pub fn new(index: usize) -> Instance {
        Instance {
            index,
            child: None,
            starts: 0,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `None` while it runs, else its exit code (`Some(None)`: a signal).
    pub fn exited(&mut self) -> Option<Option<i32>> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.code()),
            _ => None,
        }
    }

    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(pid.to_string())
                .status();
        }
    }

    /// SIGKILL, reaped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait: the exit code, or `Err` with the path of its
    /// threads' stacks (taken with gdb, in `instance-<i>-<label>.stacks`)
    /// when it did not stop within 60 s and was killed.
    pub fn stop(&mut self, work_dir: &Path, label: &str) -> Result<Option<i32>, PathBuf> {
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        self.signal_pid(child.id(), "CONT");
        self.signal_pid(child.id(), "TERM");
        for _ in 0..1200 {
            if let Ok(Some(status)) = child.try_wait() {
                return Ok(status.code());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let stacks = work_dir.join(format!("instance-{}-{label}.stacks", self.index));
        let _ = Command::new("timeout")
            .args([
                "60",
                "gdb",
                "-p",
                &child.id().to_string(),
                "-batch",
                "-ex",
                "thread apply all bt",
            ])
            .stdout(
                std::fs::File::create(&stacks)
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
            )
            .stderr(Stdio::null())
            .status();
        let _ = child.kill();
        let _ = child.wait();
        Err(stacks)
    }

    fn signal_pid(&self, pid: u32, signal: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status();
    }
}

/// The last `n` lines of an instance's log.
pub fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
