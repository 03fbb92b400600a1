//! The `apache/kafka` test container: started once per test process,
//! removed when the process exits.

use std::sync::Mutex;

use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::SyncRunner;
use testcontainers::{Container, GenericImage, ImageExt};

/// The running container; taken and removed at process exit.
static CONTAINER: Mutex<Option<Container<GenericImage>>> = Mutex::new(None);

/// Whether a Docker engine looks reachable: `DOCKER_HOST` is set, or the
/// default socket exists.
pub(super) fn docker_reachable() -> bool {
    if let Ok(host) = std::env::var("DOCKER_HOST") {
        return !host.is_empty();
    }
    std::path::Path::new("/var/run/docker.sock").exists()
}

/// Starts a single-node KRaft broker configured for transactions and
/// returns its bootstrap address.
pub(super) fn start() -> String {
    // The sync runner drives its own tokio runtime, which must not be
    // created inside a caller's runtime: start it from a thread of its own.
    std::thread::spawn(|| {
        let port = free_port();
        let image = GenericImage::new("apache/kafka", super::KAFKA_IMAGE_TAG)
            .with_wait_for(WaitFor::message_on_stdout("Kafka Server started"))
            .with_label("weir.testing", "kafka")
            // The image replaces its default config when any variable is set,
            // so every setting a single-node transactional broker needs is here.
            .with_env_var("KAFKA_NODE_ID", "1")
            .with_env_var("KAFKA_PROCESS_ROLES", "broker,controller")
            .with_env_var("KAFKA_LISTENERS", "PLAINTEXT://:9092,CONTROLLER://:9093")
            .with_env_var(
                "KAFKA_ADVERTISED_LISTENERS",
                format!("PLAINTEXT://127.0.0.1:{port}"),
            )
            .with_env_var("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER")
            .with_env_var(
                "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
                "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            )
            .with_env_var("KAFKA_CONTROLLER_QUORUM_VOTERS", "1@localhost:9093")
            .with_env_var("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1")
            .with_env_var("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
            .with_env_var("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
            .with_env_var("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")
            .with_env_var("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
            .with_mapped_port(port, 9092.tcp());
        let container = image
            .start()
            .expect("starting the apache/kafka test container failed");
        *CONTAINER.lock().unwrap_or_else(|p| p.into_inner()) = Some(container);
        remove_at_exit();
        format!("127.0.0.1:{port}")
    })
    .join()
    .expect("the testcontainers start-up thread panicked")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free local port for the Kafka container")
}

unsafe extern "C" {
    /// C's `atexit`: runs `callback` when the process exits normally.
    fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
}

/// A static is never dropped and testcontainers-rs has no reaper process,
/// so without this the container would outlive every test run. The test
/// harness ends the process with `exit`, which runs `atexit` callbacks; a
/// test process that is killed leaves the container running (it carries the
/// label `weir.testing=kafka`).
fn remove_at_exit() {
    extern "C" fn remove() {
        // A panic must not unwind into C.
        let _ = std::panic::catch_unwind(|| {
            let taken = CONTAINER.lock().ok().and_then(|mut c| c.take());
            if let Some(container) = taken {
                let _ = container.rm();
            }
        });
    }
    // SAFETY: `atexit` only stores the function pointer; `remove` is a plain
    // `extern "C" fn()` that lives for the whole program and never unwinds.
    unsafe {
        atexit(remove);
    }
}
