//! A throwaway `redis-server` per test, for tests that flush, kill or restart Redis and so must
//! not touch the shared server of the local stack. It runs with AOF (`appendfsync everysec`,
//! as the stack does) in its own temporary directory, on a free loopback port.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private Redis server; stopped (SIGKILL) and its directory removed on drop.
pub struct PrivateRedis {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    snapshots: usize,
}

impl PrivateRedis {
    /// Starts a server in a fresh directory. Panics, naming the cause, when `redis-server` is
    /// missing (the local stack installs it: `deploy/local/stack up`) or does not answer.
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free loopback port").port();
        let dir = std::env::temp_dir().join(format!("qim-private-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temporary redis directory");
        let mut server = Self { child: None, port, dir, snapshots: 0 };
        server.launch();
        server
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Asks the server to shut down cleanly (`SHUTDOWN`, which fsyncs the AOF), waits for it to
    /// exit, and starts it again on the same directory and port.
    pub fn restart(&mut self) {
        self.shutdown();
        self.launch();
    }

    /// Shuts the server down cleanly, copies its data directory (a snapshot of everything it
    /// acknowledged), and starts it again. The copy lives until the server is dropped.
    pub fn snapshot(&mut self) -> PathBuf {
        self.shutdown();
        let copy = self.dir.with_extension(format!("snapshot{}", self.snapshots));
        self.snapshots += 1;
        copy_dir(&self.dir, &copy);
        self.launch();
        copy
    }

    /// Kills the server (SIGKILL: nothing more is written) and starts it again on the data of
    /// `snapshot`, as an operator restoring an older backup would.
    pub fn restore(&mut self, snapshot: &std::path::Path) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        std::fs::remove_dir_all(&self.dir).expect("removing the current data");
        copy_dir(snapshot, &self.dir);
        self.launch();
    }

    fn shutdown(&mut self) {
        let status = Command::new("redis-cli").args(["-p", &self.port.to_string(), "SHUTDOWN"]).status();
        assert!(status.is_ok(), "redis-cli is missing: start the local stack with `deploy/local/stack up`");
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(20);
            while child.try_wait().expect("waiting for redis-server").is_none() {
                assert!(Instant::now() < deadline, "private redis-server did not shut down");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    fn launch(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes"])
            .args(["--appendfsync", "everysec", "--dir"])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("can not run redis-server ({e}): install it with `deploy/local/stack up`"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let pong = Command::new("redis-cli").args(["-p", &self.port.to_string(), "PING"]).output();
            if pong.as_ref().is_ok_and(|o| o.stdout.starts_with(b"PONG")) {
                return;
            }
            assert!(Instant::now() < deadline, "private redis-server on port {} did not answer PING", self.port);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Copies a directory tree (Redis's data directory: files and the AOF directory).
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("creating a copy of redis's data");
    for entry in std::fs::read_dir(from).expect("reading redis's data directory") {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("an entry's type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copying a data file");
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        for n in 0..self.snapshots {
            let _ = std::fs::remove_dir_all(self.dir.with_extension(format!("snapshot{n}")));
        }
    }
}
