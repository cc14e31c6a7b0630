//! Where the configuration comes from: a file named explicitly, else
//! `convstore.toml` beside the database, else the built-in defaults.

use std::path::{Path, PathBuf};

use convstore_projection::config::Config;

use crate::error::{Error, Result};

/// The file name looked for beside the database.
pub const CONFIG_FILE: &str = "convstore.toml";

/// The configuration for the database at `db`: `explicit` if given (it
/// must exist), else `convstore.toml` in the directory that holds the
/// database, else the defaults.
pub fn load(explicit: Option<&Path>, db: &Path) -> Result<Config> {
    let (path, required) = match explicit {
        Some(path) => (path.to_path_buf(), true),
        None => (beside(db), false),
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => Config::parse(&text).map_err(|source| Error::ConfigIn { path, source }),
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
        Err(source) => Err(Error::ConfigFile { path, source }),
    }
}

/// `convstore.toml` in the directory that holds the database.
pub fn beside(db: &Path) -> PathBuf {
    db.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join(CONFIG_FILE)
}
