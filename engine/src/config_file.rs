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
    let (path, text) = read(explicit, db)?;
    let Some(text) = text else {
        return Ok(Config::default());
    };
    let mut config = Config::parse(&text).map_err(|source| Error::ConfigIn {
        path: path.clone(),
        source,
    })?;
    anchor_commands(&mut config, &path);
    Ok(config)
}

/// The configuration file for the database at `db` (`explicit` if given,
/// which must exist, else `convstore.toml` beside it) and its text, if it
/// exists.
fn read(explicit: Option<&Path>, db: &Path) -> Result<(PathBuf, Option<String>)> {
    let (path, required) = match explicit {
        Some(path) => (path.to_path_buf(), true),
        None => (beside(db), false),
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok((path, Some(text))),
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => Ok((path, None)),
        Err(source) => Err(Error::ConfigFile { path, source }),
    }
}

/// The master key and keyring the configuration file names (`explicit`,
/// else the one beside `db`), else `$CONVSTORE_KEY_FILE`'s, else none.
/// Only `[encryption]` is read and checked: a mistake elsewhere in the
/// file fails the commands that use it, not every command. An error if the
/// file cannot be read or is not TOML, or `[encryption]` is wrong.
pub fn keyring_for(
    explicit: Option<&Path>,
    db: &Path,
) -> Result<Option<std::sync::Arc<convstore_store::Keyring>>> {
    keyring(&encryption_for(explicit, db)?)
}

/// The `[encryption]` of the configuration file `explicit`, else of the
/// one beside `db` (defaults without one), with a relative key file made
/// relative to that file: a configuration holding only that, for
/// [`keyring`]. An error if the file cannot be read or is not TOML, or
/// `[encryption]` is wrong.
pub fn encryption_for(explicit: Option<&Path>, db: &Path) -> Result<Config> {
    let (path, text) = read(explicit, db)?;
    let encryption =
        Config::parse_encryption(text.as_deref().unwrap_or_default()).map_err(|source| {
            Error::ConfigIn {
                path: path.clone(),
                source,
            }
        })?;
    let mut config = Config {
        encryption,
        ..Config::default()
    };
    anchor_commands(&mut config, &path);
    Ok(config)
}

/// The master key and keyring of `config` (`[encryption] key_file`), else
/// of the key file `$CONVSTORE_KEY_FILE` names, else none.
pub fn keyring(config: &Config) -> Result<Option<std::sync::Arc<convstore_store::Keyring>>> {
    let variable = convstore_store::crypto::KEY_FILE_VARIABLE;
    let file = match config.encryption.as_ref().and_then(|e| e.key_file.as_ref()) {
        Some(file) => PathBuf::from(file),
        None => match std::env::var_os(variable) {
            // Set but empty is a mistake, never taken for "no encryption".
            Some(file) if file.is_empty() => {
                return Err(Error::Invalid(format!(
                    "${variable} is set but empty: name a key file, or unset it"
                )))
            }
            Some(file) => PathBuf::from(file),
            None => return Ok(None),
        },
    };
    Ok(Some(convstore_store::Keyring::open(&file)?))
}

/// Makes a summarizer program given by a relative path (`./summarize.sh`),
/// and a relative key file, relative to the configuration file that names
/// it, not to wherever the command runs. A bare program name (`summarize`)
/// is looked up in `PATH`.
fn anchor_commands(config: &mut Config, file: &Path) {
    let dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // `dir` joined with `path`, less a leading `./` (so that messages name
    // `./summarize.sh`, not `././summarize.sh`).
    let anchored = |path: &Path| {
        let rest = path.strip_prefix(".").unwrap_or(path);
        dir.join(rest).to_string_lossy().into_owned()
    };
    if let Some(key_file) = config.encryption.as_mut().and_then(|e| e.key_file.as_mut()) {
        if Path::new(key_file.as_str()).is_relative() {
            *key_file = anchored(Path::new(key_file.as_str()));
        }
    }
    for profile in config.compaction.profiles.values_mut() {
        let program = profile
            .summary
            .as_mut()
            .and_then(|s| s.command.as_mut())
            .and_then(|argv| argv.first_mut());
        if let Some(program) = program {
            let path = Path::new(program.as_str());
            if path.is_relative() && path.components().count() > 1 {
                *program = anchored(path);
            }
        }
    }
}

/// `convstore.toml` in the directory that holds the database.
pub fn beside(db: &Path) -> PathBuf {
    db.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join(CONFIG_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A relative program or key file is taken from the configuration
    /// file's directory, and named without a doubled `./`.
    #[test]
    fn relative_paths_are_anchored_to_the_file() {
        let text = "[encryption]\nkey_file = \"./keys/master\"\n\
                    [compaction.profiles.p.summary]\nsummarizer = \"command\"\n\
                    command = [\"./summarize.sh\", \"--fast\"]\n";
        for (file, program, key) in [
            ("convstore.toml", "./summarize.sh", "./keys/master"),
            ("./convstore.toml", "./summarize.sh", "./keys/master"),
            (
                "/etc/cs/convstore.toml",
                "/etc/cs/summarize.sh",
                "/etc/cs/keys/master",
            ),
        ] {
            let mut config = Config::parse(text).unwrap();
            anchor_commands(&mut config, Path::new(file));
            let summary = config.compaction.profiles["p"].summary.as_ref().unwrap();
            let argv = summary.command.as_ref().unwrap();
            assert_eq!(argv, &[program, "--fast"], "{file}");
            let encryption = config.encryption.as_ref().unwrap();
            assert_eq!(encryption.key_file.as_deref(), Some(key), "{file}");
        }
    }
}
