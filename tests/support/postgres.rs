//! A throwaway PostgreSQL for the tests: `$CONVSTORE_TEST_POSTGRES` (a
//! URL of a database where tests may create schemas), else a cluster this
//! test process starts itself when PostgreSQL's binaries are installed
//! (initdb into a temporary directory, the server on a Unix socket only,
//! as the `postgres` user when run as root). The server is told to stop
//! when the test process ends (its parent-death signal), and the
//! directories of clusters whose process is gone are removed by the next
//! start.
//!
//! Every database a test asks for is a schema of its own in that cluster
//! ([`fresh_url`]): the URL sets `search_path` to it.
//!
//! Without PostgreSQL the tests that need it say loudly that they were
//! skipped; with `CONVSTORE_REQUIRE_POSTGRES=1` (CI) they fail instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A running server: the URL of its `postgres` database.
pub struct Server {
    /// Connects as the superuser to the `postgres` database.
    pub url: String,
    /// The socket directory (a cluster this process started), for tests
    /// that read its log or start more.
    pub dir: Option<PathBuf>,
}

impl Server {
    /// The URL of database `db` on this server.
    pub fn database_url(&self, db: &str) -> String {
        match self.url.rsplit_once("/postgres") {
            Some((base, rest)) => format!("{base}/{db}{rest}"),
            None => self.url.clone(),
        }
    }

    /// The server's log file (a cluster this process started).
    pub fn log_file(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join("log"))
    }
}

static SERVER: OnceLock<Option<Server>> = OnceLock::new();

/// The server, started on first use; `None` (after saying so on stderr)
/// when there is none, unless the environment requires one.
pub fn server() -> Option<&'static Server> {
    let server = SERVER
        .get_or_init(|| {
            if let Ok(url) = std::env::var("CONVSTORE_TEST_POSTGRES") {
                return Some(Server { url, dir: None });
            }
            match start() {
                Ok(server) => Some(server),
                Err(why) => {
                    eprintln!(
                        "\n*** PostgreSQL tests SKIPPED: {why} \
                         (install Debian's postgresql, or set CONVSTORE_TEST_POSTGRES) ***\n"
                    );
                    None
                }
            }
        })
        .as_ref();
    assert!(
        server.is_some() || std::env::var_os("CONVSTORE_REQUIRE_POSTGRES").is_none(),
        "CONVSTORE_REQUIRE_POSTGRES is set but no PostgreSQL could be started"
    );
    server
}

/// A new, empty schema on the server, and the URL of a database whose
/// tables are made and read there. `None` without a server.
pub fn fresh_url() -> Option<String> {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let server = server()?;
    let schema = format!(
        "t_{}_{}_{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    psql(&server.url, &format!("CREATE SCHEMA {schema}"));
    let sep = if server.url.contains('?') { '&' } else { '?' };
    Some(format!(
        "{}{sep}options=-c%20search_path%3D{schema}",
        server.url
    ))
}

/// A new, empty database on the server and its URL, for a test whose
/// actions reach a whole database (ending its sessions). `None` without a
/// server.
pub fn fresh_database() -> Option<String> {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let server = server()?;
    let name = format!(
        "d_{}_{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    );
    psql(&server.url, &format!("CREATE DATABASE {name}"));
    Some(server.database_url(&name))
}

/// Runs `sql` against `url`, panicking on failure; returns its output
/// (unaligned, tuples only).
pub fn psql(url: &str, sql: &str) -> String {
    let out = Command::new(bin("psql"))
        .args([
            "-X",
            "-q",
            "-t",
            "-A",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            url,
            "-c",
            sql,
        ])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The directory of PostgreSQL's server binaries, if installed.
pub fn bindir() -> Option<PathBuf> {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return Some(dir);
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists())
        .collect();
    found.sort();
    found.pop()
}

/// A PostgreSQL program: from the server binaries, else from `PATH`.
pub fn bin(name: &str) -> PathBuf {
    bindir()
        .map(|d| d.join(name))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// `program args` as the user that runs the cluster (`postgres` when we
/// are root: initdb refuses root), ended with SIGINT when `pdeathsig` and
/// the thread that started it ends.
fn as_cluster_user(program: &Path, pdeathsig: bool) -> Command {
    let mut command = Command::new("setpriv");
    if is_root() {
        command.args([
            "--reuid",
            "postgres",
            "--regid",
            "postgres",
            "--init-groups",
        ]);
    }
    if pdeathsig {
        command.args(["--pdeathsig", "INT"]);
    }
    command.arg("--").arg(program);
    command
}

/// Removes the directories of clusters started by test processes that
/// are gone.
fn clean_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("convstore-pg-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists()
            && !entry.path().join("data/postmaster.pid").exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Starts a cluster of this process's own.
pub fn start() -> Result<Server, String> {
    let bindir = bindir().ok_or("no PostgreSQL server binaries (initdb) found")?;
    if Command::new("setpriv").arg("--version").output().is_err() {
        return Err("setpriv (util-linux) is needed to run PostgreSQL for tests".into());
    }
    clean_stale();
    let dir = std::env::temp_dir().join(format!(
        "convstore-pg-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    if is_root() {
        let status = Command::new("chown")
            .args(["postgres:", &dir.to_string_lossy()])
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err("cannot give the cluster's directory to the postgres user".into());
        }
    }
    let data = dir.join("data");
    let out = as_cluster_user(&bindir.join("initdb"), false)
        .args(["-D", &data.to_string_lossy()])
        .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    run(&dir)?;
    let url = format!(
        "postgres://postgres@{}/postgres",
        dir.to_string_lossy().replace('/', "%2F")
    );
    Ok(Server {
        url,
        dir: Some(dir),
    })
}

/// Runs the server of the cluster in `dir` and waits until it accepts
/// connections. It runs as a child of a thread that lives as long as the
/// process: when the process ends, the server gets SIGINT (a fast
/// shutdown). fsync is off: a test cluster never outlives a power cut.
fn run(dir: &Path) -> Result<(), String> {
    let bindir = bindir().ok_or("no PostgreSQL server binaries found")?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("log"))
        .map_err(|e| e.to_string())?;
    let mut command = as_cluster_user(&bindir.join("postgres"), true);
    command
        .args(["-D", &dir.join("data").to_string_lossy()])
        .args(["-k", &dir.to_string_lossy()])
        .args(["-c", "listen_addresses=", "-c", "fsync=off"])
        .args(["-c", "max_connections=300", "-c", "shared_buffers=128MB"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("postgres".into())
        .spawn(move || match command.spawn() {
            Ok(mut child) => {
                let _ = tx.send(Ok(()));
                let status = child.wait();
                let _ = tx.send(Err(format!("the server exited ({status:?})")));
                // Keep the thread (the server's parent) alive until the
                // process ends.
                loop {
                    std::thread::park();
                }
            }
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
            }
        })
        .map_err(|e| e.to_string())?;
    rx.recv().map_err(|e| e.to_string())??;
    let started = Instant::now();
    loop {
        let ready = Command::new(bindir.join("pg_isready"))
            .args(["-q", "-h", &dir.to_string_lossy()])
            .status()
            .is_ok_and(|s| s.success());
        if ready {
            return Ok(());
        }
        if let Ok(Err(exited)) = rx.try_recv() {
            return Err(exited);
        }
        if started.elapsed() > Duration::from_secs(30) {
            let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
            return Err(format!("the server did not start: {log}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Server {
    /// Kills the server of a cluster this process started with SIGKILL
    /// (its backends end when they notice), as a crash would.
    pub fn kill9(&self) {
        let dir = self.dir.as_ref().expect("a cluster of this process");
        let pid = std::fs::read_to_string(dir.join("data/postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next().map(str::to_owned))
            .expect("postmaster.pid");
        Command::new("kill")
            .args(["-9", pid.trim()])
            .status()
            .expect("kill runs");
    }

    /// Starts the server of a cluster this process started again (after
    /// [`Server::kill9`]): crash recovery, then connections.
    pub fn restart(&self) {
        let dir = self.dir.as_ref().expect("a cluster of this process");
        let started = Instant::now();
        // The killed server's backends may still hold its shared memory
        // for a moment.
        loop {
            match run(dir) {
                Ok(()) => return,
                Err(e) if started.elapsed() > Duration::from_secs(30) => {
                    panic!("PostgreSQL did not restart: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }
}
