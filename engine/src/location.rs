//! Where a database is: [`Location`].

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Where a database is: a directory (sled and its segment files, the
/// embedded default) or a PostgreSQL URL (`postgres://user@host/db`).
/// Any other URL names a kind of database this build cannot open and is
/// refused, never taken for a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// A database directory.
    Path(PathBuf),
    /// A PostgreSQL database, by its connection URL.
    Postgres(String),
}

impl Location {
    /// Reads a location: anything that looks like a URL (`scheme://...`)
    /// is a URL, never a directory path, so `postgres://...` cannot become
    /// a directory named `postgres:`.
    pub fn parse(text: &str) -> Result<Location> {
        // libpq's `key=value` connection strings are not taken for paths
        // (nor echoed: they may hold a password).
        let conninfo = [
            "host=",
            "hostaddr=",
            "dbname=",
            "user=",
            "port=",
            "password=",
        ]
        .iter()
        .any(|key| text.trim_start().starts_with(key));
        if conninfo && text.contains('=') {
            return Err(Error::Invalid(
                "a key=value connection string is not a location: give the database as a \
                 postgres:// URL (postgres://USER@HOST/DB)"
                    .to_owned(),
            ));
        }
        if let Some((scheme, rest)) = text.split_once(':') {
            let is_scheme = !scheme.is_empty()
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
            // `scheme://...`, or a database scheme without the slashes
            // (`sqlite:conv.db`, `postgres:mydb`).
            let lower = scheme.to_ascii_lowercase();
            let known = KNOWN_SCHEMES.contains(&lower.as_str());
            if is_scheme && rest.starts_with("//") && (lower == "postgres" || lower == "postgresql")
            {
                return Ok(Location::Postgres(text.to_owned()));
            }
            if is_scheme
                && !rest.starts_with("//")
                && (lower == "postgres" || lower == "postgresql")
            {
                return Err(Error::Invalid(format!(
                    "{}: a PostgreSQL URL starts with {lower}:// ({lower}:///{} names a \
                     database on this machine's default socket)",
                    convstore_store::backend::postgres::redact(text),
                    convstore_store::backend::postgres::redact(rest),
                )));
            }
            if is_scheme && (rest.starts_with("//") || known) {
                return Err(Error::UnsupportedLocation {
                    // Said without its password.
                    location: convstore_store::backend::postgres::redact(text),
                    scheme: scheme.to_owned(),
                });
            }
        }
        Ok(Location::Path(PathBuf::from(text)))
    }

    /// A directory path, as is.
    pub fn from_path(path: impl Into<PathBuf>) -> Location {
        Location::Path(path.into())
    }

    /// The directory, for a location that is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Location::Path(path) => Some(path),
            Location::Postgres(_) => None,
        }
    }
}

/// Schemes read as URLs even without `//`: databases and protocols a
/// location might name.
const KNOWN_SCHEMES: &[&str] = &[
    "postgres",
    "postgresql",
    "sqlite",
    "sqlite3",
    "mysql",
    "mariadb",
    "redis",
    "mongodb",
    "http",
    "https",
    "file",
    "s3",
    "gs",
    "ftp",
    "ssh",
    "sled",
];

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Path(path) => write!(f, "{}", path.display()),
            Location::Postgres(url) => {
                f.write_str(&convstore_store::backend::postgres::redact(url))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_never_paths() {
        assert_eq!(
            Location::parse("postgres://me@host/db").ok(),
            Some(Location::Postgres("postgres://me@host/db".into()))
        );
        assert_eq!(
            Location::parse("postgresql:///db?host=/tmp").ok(),
            Some(Location::Postgres("postgresql:///db?host=/tmp".into()))
        );
        assert!(matches!(
            Location::parse("postgres:mydb"),
            Err(Error::Invalid(_))
        ));
        for url in [
            "sqlite:///x",
            "http://h",
            "x+y://z",
            "sqlite:conv.db",
            "http:x",
            "sqlite::memory:",
        ] {
            assert!(matches!(
                Location::parse(url),
                Err(Error::UnsupportedLocation { .. })
            ));
        }
        for path in [
            "db",
            "./a://b",
            "/tmp/x",
            "c:/d",
            "://x",
            "notes:2024",
            "a b:c",
        ] {
            assert_eq!(
                Location::parse(path).ok(),
                Some(Location::Path(path.into())),
                "{path}"
            );
        }
    }
}
