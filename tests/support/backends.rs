//! The backends a test runs against: the same test, through the storage
//! seam, on each (sled in a directory, memory, and PostgreSQL where a
//! server is available: `support::postgres`).

use std::sync::Arc;

use convstore_store::backend::postgres::{PgBackend, Setup};
use convstore_store::backend::MemoryBackend;
use convstore_store::Store;

/// A kind of backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sled,
    Memory,
    Postgres,
}

impl Kind {
    /// Every kind, PostgreSQL only where a server is available.
    pub fn all() -> Vec<Kind> {
        let mut kinds = vec![Kind::Sled, Kind::Memory];
        if super::postgres::server().is_some() {
            kinds.push(Kind::Postgres);
        }
        kinds
    }

    /// The kind numbered `n` among [`Kind::all`] (for property tests,
    /// which draw a number).
    pub fn nth(n: u8) -> Kind {
        let all = Kind::all();
        all[n as usize % all.len()]
    }
}

/// Where a test's database lives, and how it is opened again.
pub enum Place {
    /// A sled database in a temporary directory: opened again from its
    /// files.
    Sled(tempfile::TempDir),
    /// A database in memory: opened again over the same backend.
    Memory(Arc<MemoryBackend>),
    /// A schema of its own in the test PostgreSQL: opened again by URL.
    Postgres(String),
}

impl Place {
    /// A new, empty database: in memory if `memory`, else in sled.
    pub fn new(memory: bool) -> Place {
        Place::of(if memory { Kind::Memory } else { Kind::Sled })
    }

    /// A new, empty database of `kind`.
    pub fn of(kind: Kind) -> Place {
        match kind {
            Kind::Sled => Place::Sled(tempfile::tempdir().expect("temp dir")),
            Kind::Memory => Place::Memory(Arc::new(MemoryBackend::new())),
            Kind::Postgres => {
                Place::Postgres(super::postgres::fresh_url().expect("a PostgreSQL server"))
            }
        }
    }

    /// One new database of each kind.
    pub fn each() -> Vec<Place> {
        Kind::all().into_iter().map(Place::of).collect()
    }

    /// The database, opened (again).
    pub fn open(&self) -> Store {
        match self {
            Place::Sled(dir) => Store::open(dir.path().join("db")).expect("open"),
            Place::Memory(backend) => Store::with_backend(backend.clone()).expect("open"),
            Place::Postgres(url) => Store::with_backend(Arc::new(
                PgBackend::connect(url, Setup::Create).expect("connect to PostgreSQL"),
            ))
            .expect("open"),
        }
    }

    /// Its name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Place::Sled(_) => "sled",
            Place::Memory(_) => "memory",
            Place::Postgres(_) => "postgres",
        }
    }
}
