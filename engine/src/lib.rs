//! convstore as a library: the engine every face is built on.
//!
//! The command line, the server, and programs that embed convstore all go
//! through this crate: it opens a database from a [`Location`], appends,
//! projects the view a model sees (streamed, as of any past record),
//! keeps materialized views current, compacts with profiles and
//! summarizers (automatically too), forks, explains, verifies and
//! generates. It prints nothing and reads no environment: what it needs
//! (a configuration, an API key) is passed in. Errors are [`Error`].
//!
//! Below it, `convstore_store` keeps the logs and `convstore_projection`
//! is the pure projection engine; [`Engine`] ties them together.
//!
//! ```
//! use convstore_engine::{Engine, Location, OpenOptions};
//!
//! let dir = tempfile::tempdir()?;
//! let location = Location::parse(dir.path().join("db").to_str().unwrap())?;
//! let engine = Engine::open(&location, &OpenOptions::create())?;
//! let events = convstore_engine::parse_ndjson(
//!     "{\"type\":\"user\",\"text\":\"hello\"}\n{\"type\":\"assistant\",\"text\":\"hi\"}\n",
//! )?;
//! let (id, _) = engine.store().create_and_append(Some("chat"), &events, &Default::default())?;
//! let mut view = Vec::new();
//! engine.project(&id, None, |event| {
//!     view.push(event.clone());
//!     Ok(())
//! })?;
//! assert_eq!(view.len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auto;
pub mod calls;
pub mod compact;
pub mod config_file;
pub mod diff;
mod engine;
pub mod error;
pub mod explain;
pub mod export;
pub mod fork;
pub mod format;
pub mod generate;
pub mod import;
pub mod inspect;
mod location;
pub mod pipeline;
pub mod recall;
mod replan;
pub mod retention;
pub mod search;
pub mod stats;
pub mod summarizers;
pub mod turns;
pub mod views;

pub use engine::{
    deletion_json, keyless_verification_json, parse_event_array, parse_ndjson, redaction_json,
    verification_json, Engine, Verification,
};
pub use error::{Error, Result};
pub use location::Location;
pub use pipeline::{AsOf, Scope};
pub use summarizers::Secrets;

pub use convstore_projection as projection;
pub use convstore_store as store;
pub use convstore_store::OpenOptions;
