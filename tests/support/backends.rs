//! The backends a test runs against: the same test, through the storage
//! seam, on each (sled in a directory, memory; PostgreSQL where a server
//! is available).

use std::sync::Arc;

use convstore_store::backend::MemoryBackend;
use convstore_store::Store;

/// Where a test's database lives, and how it is opened again.
pub enum Place {
    /// A sled database in a temporary directory: opened again from its
    /// files.
    Sled(tempfile::TempDir),
    /// A database in memory: opened again over the same backend.
    Memory(Arc<MemoryBackend>),
}

impl Place {
    /// A new, empty database: in memory if `memory`, else in sled.
    pub fn new(memory: bool) -> Place {
        if memory {
            Place::Memory(Arc::new(MemoryBackend::new()))
        } else {
            Place::Sled(tempfile::tempdir().expect("temp dir"))
        }
    }

    /// One new database of each kind.
    pub fn each() -> Vec<Place> {
        vec![Place::new(false), Place::new(true)]
    }

    /// The database, opened (again).
    pub fn open(&self) -> Store {
        match self {
            Place::Sled(dir) => Store::open(dir.path().join("db")).expect("open"),
            Place::Memory(backend) => Store::with_backend(backend.clone()).expect("open"),
        }
    }

    /// Its name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Place::Sled(_) => "sled",
            Place::Memory(_) => "memory",
        }
    }
}
